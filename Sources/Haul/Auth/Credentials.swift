public import Foundation

/// A user name and password for HTTP Basic authentication (to a server, or to a proxy).
///
/// Its description never shows the password (`user:***`), so a credential that ends up in a message, a log line
/// or an event is not disclosed.
public struct Credentials: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The user name.
    public var user: String
    /// The password (may be empty).
    public var password: String

    /// Creates credentials.
    public init(user: String, password: String) {
        self.user = user
        self.password = password
    }

    /// Parses `USER:PASSWORD` as curl's `-u` takes it: split at the first colon; without one, the whole text is
    /// the user and the password is empty.
    public init(userColonPassword text: String) {
        if let colon = text.firstIndex(of: ":") {
            self.init(user: String(text[..<colon]), password: String(text[text.index(after: colon)...]))
        } else {
            self.init(user: text, password: "")
        }
    }

    /// The credentials a URL carries in its user info (`https://user:password@host/`), percent-decoded, or `nil`
    /// when it has no user.
    public init?(userInfoOf url: URL) {
        guard let user = url.user(percentEncoded: false), !user.isEmpty || url.password != nil else { return nil }
        self.init(user: user, password: url.password(percentEncoded: false) ?? "")
    }

    /// The value of an `Authorization` (or `Proxy-Authorization`) field for these credentials: `Basic` and the
    /// Base64 of `user:password` in UTF-8.
    public var basicAuthorization: String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// `user:***`: the password is never shown.
    public var description: String { "\(user):***" }

    /// Same as ``description``.
    public var debugDescription: String { description }
}
