import NIOCore
import NIOHTTP1

/// Where body bytes come from.
enum BodySource {
    case generated(GeneratedContent)
    /// The handle is owned by the plan and closed when the response ends.
    case file(NIOFileHandle)
    case buffer(ByteBuffer)
}

/// How to send one body: which bytes, and which faults interrupt it.
struct BodyPlan {
    var source: BodySource
    /// Byte positions within the content.
    var range: Range<Int>
    /// Body bytes to send before finishing or closing (less than `range.count` for cut and short bodies).
    var sendCount: Int
    /// Stall once after this many body bytes.
    var stallAfter: Int?
    var stallLength: Fault.StallLength
    var bytesPerSecond: Int?

    /// A cut or short body ends by closing the connection instead of completing the message.
    var closesEarly: Bool { sendCount < range.count }
    /// No fault needs the body sliced: a file goes out as one sendfile region.
    var isPlain: Bool { stallAfter == nil && bytesPerSecond == nil }
}

/// What the handler does with one request.
enum ResponseAction {
    /// Close the connection without a byte.
    case drop
    /// A head and an optional body.
    case respond(HTTPResponseHead, body: BodyPlan?, headOnly: Bool)
}
