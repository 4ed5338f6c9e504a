import Foundation
import HTTPTypes
import HaulOperations
import Logging

/// Where a request is in its chain of redirects, and what its next hop sends: the rules of following a redirect, kept
/// free of I/O so each is tested without a server. Every request the engine sends (one stream, a first piece, a
/// segment, a mirror) goes through one of these.
struct Hops: Sendable {
    var url: URL
    /// The request's own fields for the current hop: its credential fields (`Authorization`, `Cookie`,
    /// `Proxy-Authorization`) go at the first hop to another origin, and do not come back.
    var fields: HTTPFields
    /// The URLs visited, made at the first redirect (most downloads have none).
    var visited: Set<String> = []
    var count = 0
    /// Whether a hop before the current one was `https`: a credential provider's credentials never go over plain
    /// `http` after it (a downgrade would send them in clear).
    var wasSecure = false
    /// Whether a redirect has left the first hop's origin (scheme, host and port): the request's own credentials
    /// are not sent for the rest of the hops, even back at its URL's origin (whose path another server chose).
    var leftOrigin = false

    /// A new chain of redirects from the current hop (for the next request to where an earlier chain led): what the
    /// hops so far left of the fields and credential rules stays; the count and the URLs visited start again.
    func newChain() -> Hops {
        Hops(url: url, fields: fields, wasSecure: wasSecure, leftOrigin: leftOrigin)
    }

    /// Follows the redirect `head` from the current hop: the next hop's URL, or the error that ends the download (no
    /// usable `Location`, a scheme other than `http` and `https`, more than `limit` redirects, a URL already visited).
    mutating func follow(_ head: HTTPResponse, limit: Int) throws(DownloadError) -> URL {
        let from = url
        let target = try HTTPRules.redirectTarget(location: head.headerFields[.location], from: from).get()
        guard count < limit else {
            throw DownloadError(.tooManyRedirects, message: "more than \(limit) redirects", url: target)
        }
        if visited.isEmpty { visited.insert(from.absoluteString) }
        guard visited.insert(target.absoluteString).inserted else {
            throw DownloadError(
                .redirectLoop, message: "redirect loop: '\(target.redactedString)' was already visited", url: from)
        }
        count += 1
        if HTTPRules.origin(of: target) != HTTPRules.origin(of: from) {
            for name in HTTPRules.credentialFields { fields[name] = nil }
            leftOrigin = true
        }
        if HTTPRules.isSecure(from) { wasSecure = true }
        url = target
        return target
    }
}

/// What a request asks of the file beyond a plain `GET`: a range, the validator that must still hold for it, and a
/// revalidation's condition.
struct RangeAsk: Equatable {
    /// The first byte asked for; 0 and no ``end``: the whole file.
    var from: Int64 = 0
    /// One past the last byte asked for (a closed range); `nil`: to the end of the file.
    var end: Int64?
    /// Sent as `If-Range` with a range: a server whose file has another validator sends the whole file instead.
    var ifRange: String?
    /// A revalidation's validator (`If-None-Match` for a strong ETag, else `If-Modified-Since`).
    var condition: String?

    /// Whether nothing is asked beyond a plain `GET`.
    var isPlain: Bool { from == 0 && end == nil && condition == nil }

    /// The request's header fields: `fields` with the engine's own (`Accept-Encoding: identity`, a default
    /// `User-Agent`) and this ask's; a `Range` or `If-Range` of the caller's is replaced.
    func apply(to fields: HTTPFields, userAgent: String) -> HTTPFields {
        var fields = fields
        // Bodies are stored as sent, so Range offsets are offsets into the file (ARCHITECTURE.md, "Invariants" 7).
        fields[.acceptEncoding] = "identity"
        if fields[.userAgent] == nil { fields[.userAgent] = userAgent }
        fields[.range] = nil
        fields[.ifRange] = nil
        if let end {
            fields[.range] = "bytes=\(from)-\(end - 1)"
        } else if from > 0 {
            fields[.range] = "bytes=\(from)-"
        }
        if fields[.range] != nil, let ifRange { fields[.ifRange] = ifRange }
        // A revalidation's condition goes with any range: the server evaluates it first (RFC 9110 13.2.2), so a
        // current file is a 304 whether the rest of a new copy or a first piece was asked for.
        if let condition {
            // A strong ETag is the exact test; a date the next best (RFC 9110 13.1.3).
            if condition.hasPrefix("\"") {
                fields[.ifNoneMatch] = condition
            } else {
                fields[.ifModifiedSince] = condition
            }
        }
        return fields
    }
}

/// A response that is not a redirect, with what its request was sent with.
struct HopResponse {
    var response: TransportResponse
    var url: URL
    /// The proxy it went through and whether it carried credentials, for naming who refused what.
    var sent: ResponseDecision.Sent
    var sentAt: ContinuousClock.Instant
}

extension DownloadRun {
    /// What sending a request came to: a response, or (on an interruptible attempt) a hop the transport cannot
    /// interrupt, which the attempt must send from a task of its own.
    enum HopOutcome {
        case response(HopResponse)
        case needsOwnTask
    }

    /// The queue slot a request's hops move to their origin.
    enum SlotToMove {
        /// The download's own (``moveSlot(to:watched:)``): its stream's requests, and those of the first connection
        /// of a segmented transfer, which holds it.
        case download
        /// An extra connection's of a segmented transfer.
        case connection(ConnectionSlot)
    }

    /// Moves `slot` to the origin of `url` (nothing to do without one, or without a queue); a wait for it there is no
    /// stall for `clock` (a connection's own), else for the download. Returns `false` when the task was cancelled
    /// first.
    private func move(_ slot: SlotToMove?, to url: URL, clock: ActivityClock?) async -> Bool {
        guard let slot, let connections else { return true }
        // A segmented transfer's connections are watched on their own clocks (the download's is not, meanwhile).
        let watched = clock ?? lastActivity
        switch slot {
        case .download: return await moveSlot(to: url, watched: watched)
        case .connection(let held): return await held.move(to: url, through: connections, watched: watched)
        }
    }

    /// Sends the request `asking` for the current hop of `hops`, and follows redirects until a response that is not
    /// one: each hop waits for its turn (pacing and host holds), takes its proxy, credentials and cookies, stores the
    /// cookies it is sent, and a redirect is told to `emit` as ``DownloadEvent/redirected(from:to:status:)``. The waits
    /// are no stall for `clock` (a connection's own); with `interruption`, every request goes through
    /// ``interruptibleTransport``. Under a queue, each hop's request goes out once `slot` counts against its origin
    /// (a download counts against the host it fetches from); the wait for it there is no stall.
    func send(
        _ hops: inout Hops, asking: RangeAsk, clock: ActivityClock?, interruption: TransferInterruption?,
        slot: SlotToMove?, emit: @Sendable (DownloadEvent) -> Void
    ) async throws -> HopOutcome {
        while true {
            let url = hops.url
            if !(await move(slot, to: url, clock: clock)) { throw CancellationError() }
            // Most downloaders pace nothing, and no host asked them for time.
            if pacer.isActive { try await waitForTurn(url: url, clock: clock, emit: emit) }
            let fields = withCredentialsAndCookies(for: hops)
            var head = HTTPRules.getRequest(for: url)
            // Most requests set no fields and ask for no range: the fields made once are theirs, with nothing to copy.
            head.headerFields =
                fields.isEmpty && asking.isPlain
                ? baseFields : asking.apply(to: fields, userAgent: configuration.userAgent)
            let options = options(for: url)
            logger.debug("request", metadata: ["url": "\(url.redactedString)", "range-from": "\(asking.from)"])
            // A cancelled task sends nothing: some transports would still put the request on the wire.
            try Task.checkCancellation()
            let sentAt = ContinuousClock.now
            let response: TransportResponse
            do {
                if let interruption {
                    guard let interruptibleTransport, interruptibleTransport.canInterrupt(head, options: options) else {
                        return .needsOwnTask
                    }
                    response = try await interruptibleTransport.send(head, options: options, interruption: interruption)
                } else {
                    response = try await transport.send(head, options: options)
                }
            } catch {
                if Task.isCancelled { throw CancellationError() }
                throw transportFailure(error, url: url)
            }
            lastActivity.touch()
            clock?.touch()
            let status = response.head.status.code
            logger.debug("response", metadata: ["status": "\(status)", "url": "\(url.redactedString)"])
            // Redirects included: a site that sets its session cookie on a redirect expects it on the next hop.
            if let jar = configuration.cookies {
                let values = response.head.headerFields[values: .setCookie]
                if !values.isEmpty { jar.store(setCookie: values, from: url) }
            }
            guard HTTPRules.redirectStatuses.contains(status) else {
                return .response(
                    HopResponse(
                        response: response, url: url,
                        sent: .init(proxy: options.proxy, credentials: head.headerFields[.authorization] != nil),
                        sentAt: sentAt))
            }
            await response.body.close()
            let target: URL
            do {
                target = try hops.follow(response.head, limit: configuration.maxRedirects)
            } catch {
                throw AttemptFailure.permanent(error)
            }
            logger.info("redirect", metadata: ["from": "\(url.redactedString)", "to": "\(target.redactedString)"])
            emit(.redirected(from: url, to: target, status: status))
        }
    }
}
