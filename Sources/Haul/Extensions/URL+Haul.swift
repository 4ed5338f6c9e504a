public import Foundation

extension URL {
    /// The URL as text with its password, if it has one, replaced by `***` (`https://user:***@host/file`): what
    /// messages, logs and events show, so that a password in a URL is never printed.
    public var redactedString: String {
        guard password != nil, var components = URLComponents(url: self, resolvingAgainstBaseURL: false) else {
            return absoluteString
        }
        components.percentEncodedPassword = "***"
        return components.string ?? absoluteString
    }
}
