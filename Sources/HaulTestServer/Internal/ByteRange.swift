/// The outcome of reading a `Range` header against a body of known size.
enum ByteRangeRequest: Equatable {
    /// No usable single range: send the whole body with 200.
    case full
    /// Send `range` with 206.
    case partial(Range<Int>)
    /// 416 with `Content-Range: bytes */SIZE`.
    case unsatisfiable

    /// Parses `bytes=a-b`, `bytes=a-` and `bytes=-n`. Several ranges or bad syntax yield `.full`,
    /// which RFC 9110 allows (a server may ignore Range).
    init(header: String?, size: Int) {
        guard let header, header.hasPrefix("bytes=") else {
            self = .full
            return
        }
        let spec = header.dropFirst("bytes=".count).trimmingSpaces
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else {
            self = .full
            return
        }
        let first = spec[..<dash].trimmingSpaces
        let last = spec[spec.index(after: dash)...].trimmingSpaces
        if first.isEmpty {
            guard let suffix = Int(last), suffix >= 0 else {
                self = .full
                return
            }
            self = suffix == 0 || size == 0 ? .unsatisfiable : .partial(max(0, size - suffix)..<size)
            return
        }
        guard let start = Int(first), start >= 0 else {
            self = .full
            return
        }
        var end = size - 1
        if !last.isEmpty {
            guard let parsed = Int(last), parsed >= start else {
                self = .full
                return
            }
            end = min(parsed, size - 1)
        }
        self = start >= size ? .unsatisfiable : .partial(start..<(end + 1))
    }
}

extension StringProtocol {
    var trimmingSpaces: Substring {
        var slice = Substring(self)
        while slice.first == " " { slice.removeFirst() }
        while slice.last == " " { slice.removeLast() }
        return slice
    }
}
