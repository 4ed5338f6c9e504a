package import HTTPTypes

extension HTTPFields {
    /// The value of the first field named `name`, for fields that occur once (`ETag`, `Content-Range`, ...).
    ///
    /// The subscript joins the values of every field of the name into a new string.
    func first(_ name: HTTPField.Name) -> String? {
        first { $0.name == name }?.value
    }
}

extension HTTPFields {
    /// Calls `body` with each field as HTTP/1.1 sends them: the `Cookie` fields joined into one with `; `, last
    /// (RFC 6265, 5.4: one `Cookie` field per request). HTTPTypes keeps each cookie a field of its own, as HTTP/2
    /// compresses them.
    package func forEachJoiningCookies(_ body: (HTTPField) throws -> Void) rethrows {
        var cookies: [String] = []
        for field in self {
            if field.name == .cookie { cookies.append(field.value) } else { try body(field) }
        }
        if !cookies.isEmpty { try body(HTTPField(name: .cookie, value: cookies.joined(separator: "; "))) }
    }
}
