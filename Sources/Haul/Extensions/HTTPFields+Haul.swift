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
    /// The fields as HTTP/1.1 sends them: every `Cookie` field joined into one with `; ` (RFC 6265, 5.4: one
    /// `Cookie` field per request). HTTPTypes keeps each cookie a field of its own, as HTTP/2 compresses them.
    package var joiningCookies: [HTTPField] {
        guard contains(where: { $0.name == .cookie }) else { return Array(self) }
        var fields = filter { $0.name != .cookie }
        fields.append(HTTPField(name: .cookie, value: self[values: .cookie].joined(separator: "; ")))
        return Array(fields)
    }
}
