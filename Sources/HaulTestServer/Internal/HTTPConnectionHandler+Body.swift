#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOHTTP1

extension HTTPConnectionHandler {
    /// Writes body slices while the channel is writable; returns when it is not (writability resumes
    /// it), when a timer is due (rate, stall), or when the body is done.
    func pump(context: ChannelHandlerContext) {
        // A flush inside the loop can drain the socket and fire channelWritabilityChanged synchronously, and the
        // end of a message can start the next pipelined exchange: both call pump again while the loop below
        // still holds its own copy of the offset. Run nested, such a call sent from a stale offset (a slow reader
        // got part of the body twice); ignored, it lost the next pipelined response. So it is recorded and run
        // after the current pass, with fresh state.
        if isPumping {
            pumpAgain = true
            return
        }
        isPumping = true
        defer { isPumping = false }
        repeat {
            pumpAgain = false
            pumpPass(context: context)
        } while pumpAgain
    }

    private func pumpPass(context: ChannelHandlerContext) {
        guard var current = exchange, !current.bodyDone, let body = current.body else { return }
        let exchangeGeneration = generation
        // Written back only to the same exchange: ending this one may already have begun the next pipelined one.
        defer {
            if generation == exchangeGeneration, exchange != nil {
                exchange?.sent = current.sent
                exchange?.stalled = current.stalled
            }
        }
        var wroteSomething = false
        while current.sent < body.sendCount {
            if let stallAt = body.stallAfter, !current.stalled, current.sent == stallAt {
                current.stalled = true
                context.flush()
                switch body.stallLength {
                case .milliseconds(let milliseconds):
                    schedulePump(context: context, in: .milliseconds(Int64(milliseconds)))
                case .untilGate(let gate):
                    guard let opened = server.state.waitAtGate(gate, eventLoop: context.eventLoop) else {
                        continue  // the gate is open already
                    }
                    let stalledExchange = generation
                    opened.assumeIsolated().whenSuccess {
                        guard self.generation == stalledExchange, self.isActive else { return }
                        self.pump(context: context)
                    }
                case .forever:
                    break
                }
                // A stall forever ends only when the client closes the connection; the others resume it.
                return
            }
            var sliceLength = body.sendCount - current.sent
            if case .generated = body.source { sliceLength = min(sliceLength, server.chunkSize) }
            if case .file = body.source, !body.isPlain || usesTLS { sliceLength = min(sliceLength, server.chunkSize) }
            if let stallAt = body.stallAfter, !current.stalled {
                sliceLength = min(sliceLength, stallAt - current.sent)
            }
            if let rate = body.bytesPerSecond {
                let now = NIODeadline.now()
                let start = current.rateStart ?? now
                if current.rateStart == nil { current.rateStart = now; exchange?.rateStart = now }
                let elapsed = Double((now - start).nanoseconds) / 1e9
                // Saturated: a rate near Int.max (a client's to choose) would overflow the conversion after a second.
                let budget = Double(rate) * elapsed
                let allowed = (budget >= 1e18 ? Int(1e18) : Int(budget)) - current.sent
                // Wait for a slice worth about 10 ms of the rate: tiny slices would be per-byte work.
                let minimumSlice = min(max(1, rate / 100), sliceLength)
                if allowed < minimumSlice {
                    if wroteSomething { context.flush() }
                    // 10 ms slices keep the stream smooth; the elapsed-time budget keeps it accurate.
                    schedulePump(context: context, in: .milliseconds(10))
                    return
                }
                sliceLength = min(sliceLength, allowed)
            }
            writeSlice(context: context, body: body, offset: body.range.lowerBound + current.sent, length: sliceLength)
            current.sent += sliceLength
            wroteSomething = true
            server.state.bodyBytesSent(sliceLength, path: current.path)
            if !context.channel.isWritable {
                context.flush()
                // Still full: channelWritabilityChanged resumes the body once the reader catches up.
                if !context.channel.isWritable { return }
            }
        }
        exchange?.sent = current.sent
        exchange?.bodyDone = true
        current.bodyDone = true
        if body.closesEarly {
            closeAfterFlush(context: context)
        } else {
            endMessage(context: context)
        }
    }

    private func schedulePump(context: ChannelHandlerContext, in delay: TimeAmount) {
        let current = generation
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: delay) {
            self.timer = nil
            guard self.generation == current, self.isActive else { return }
            self.pump(context: context)
        }
    }

    private func writeSlice(context: ChannelHandlerContext, body: BodyPlan, offset: Int, length: Int) {
        var promise: EventLoopPromise<Void>?
        if server.recordsBodyTimeline, let path = exchange?.path {
            let written = context.eventLoop.makePromise(of: Void.self)
            let state = server.state
            written.futureResult.whenSuccess { state.bodyWritten(length, path: path, at: .now) }
            promise = written
        }
        switch body.source {
        case .generated(let content):
            var buffer = context.channel.allocator.buffer(capacity: length)
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { pointer in
                content.fill(UnsafeMutableRawBufferPointer(rebasing: pointer[0..<length]), from: offset)
                return length
            }
            context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: promise)
        case .file(let handle) where usesTLS:
            var buffer = context.channel.allocator.buffer(capacity: length)
            _ = try? handle.withUnsafeFileDescriptor { descriptor in
                buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { pointer in
                    max(0, pread(descriptor, pointer.baseAddress, length, off_t(offset)))
                }
            }
            context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: promise)
        case .file(let handle):
            let region = FileRegion(fileHandle: handle, readerIndex: offset, endIndex: offset + length)
            context.write(wrapOutboundOut(.body(.fileRegion(region))), promise: promise)
        case .buffer(let buffer):
            let slice = buffer.getSlice(at: buffer.readerIndex + offset, length: length) ?? ByteBuffer()
            context.write(wrapOutboundOut(.body(.byteBuffer(slice))), promise: promise)
        }
    }
}
