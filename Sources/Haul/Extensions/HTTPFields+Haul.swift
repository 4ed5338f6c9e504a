import HTTPTypes

extension HTTPFields {
    /// The value of the first field named `name`, for fields that occur once (`ETag`, `Content-Range`, ...).
    ///
    /// The subscript joins the values of every field of the name into a new string.
    func first(_ name: HTTPField.Name) -> String? {
        first { $0.name == name }?.value
    }
}
