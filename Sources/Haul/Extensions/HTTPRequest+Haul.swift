import Foundation
import HTTPTypes
import HTTPTypesFoundation

extension HTTPRequest {
    /// A GET for `url`, as `HTTPRequest(method: .get, url:)` makes it, without its cost where the URL is plain.
    ///
    /// On Linux that initializer parses the URL again through `URLComponents` for every request, about 1% of a small
    /// download's CPU. A plain `scheme://host[:port][/path][?query]` (no user info, no fragment, ASCII) is split here
    /// from its string as it stands; anything else goes through the initializer.
    static func get(_ url: URL) -> HTTPRequest {
        let text = url.absoluteString
        let bytes = text.utf8
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")),
            bytes[colon...].starts(with: "://".utf8),
            bytes.allSatisfy({ $0 < 0x80 && $0 != UInt8(ascii: "#") })
        else { return HTTPRequest(method: .get, url: url) }
        let authorityStart = bytes.index(colon, offsetBy: 3)
        let authorityEnd =
            bytes[authorityStart...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") } ?? bytes.endIndex
        let authority = text[authorityStart..<authorityEnd]
        guard !authority.isEmpty, !authority.utf8.contains(UInt8(ascii: "@")) else {
            return HTTPRequest(method: .get, url: url)
        }
        let rest = text[authorityEnd...]
        let path = rest.isEmpty ? "/" : rest.hasPrefix("?") ? "/" + rest : String(rest)
        return HTTPRequest(
            method: .get, scheme: String(text[..<colon]), authority: String(authority), path: path)
    }
}
