import Foundation
import Haul

/// Hides the secrets of the process's own arguments from other users: what `ps` and `/proc/PID/cmdline` show is the
/// argument vector's memory, which stays readable for the whole run. As curl blanks `-u`, these are overwritten with
/// `*` in place, once the arguments have been copied for parsing (lengths stay, so nothing moves): the password of
/// `-u/--user USER:PASSWORD` (`-ku USER:PASSWORD` too), of every URL with one (`https://user:password@...`, `--db`),
/// of `-x/--proxy`'s with or without a scheme, and the value of a `--header` that carries a secret
/// (`DownloadRequest.isSecretField(_:)`: `Authorization`, `Cookie`, `X-Api-Key`...), with its colon or without.
enum ArgumentSecrets {
    /// The options whose next argument (or `=`-joined value) is `USER:PASSWORD`.
    static let credentialOptions: Set<String> = ["-u", "--user"]
    /// The options whose value is a header field.
    static let headerOptions: Set<String> = ["--header"]
    /// The options whose value is a URL that may carry a password without a scheme (curl's
    /// `[SCHEME://]USER:PASSWORD@HOST:PORT` for a proxy).
    static let urlOptions: Set<String> = ["-x", "--proxy"]
    /// The short options above, by letter: in a group (`-ku`) one takes the rest of the group or the next argument.
    static let shortOptions: [UInt8: String] = [UInt8(ascii: "u"): "-u", UInt8(ascii: "x"): "-x"]

    /// Overwrites the secrets in the argument vector (`CommandLine.unsafeArgv`). Call it after `CommandLine.arguments`
    /// has been read: the parser works on that copy.
    static func hideInArgumentVector() {
        let argv = CommandLine.unsafeArgv
        let arguments = (0..<Int(CommandLine.argc)).map { index in argv[index].map { String(cString: $0) } ?? "" }
        for (index, range) in secretRanges(in: arguments) {
            guard let pointer = argv[index] else { continue }
            let bytes = UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: UInt8.self)
            for offset in range { bytes[offset] = UInt8(ascii: "*") }
        }
    }

    /// The byte ranges to hide, by argument index: a value, which option it belongs to, says what its secret is.
    static func secretRanges(in arguments: [String]) -> [(Int, Range<Int>)] {
        var ranges: [(Int, Range<Int>)] = []
        var pending: String?
        for (index, argument) in arguments.enumerated() where index > 0 {
            let bytes = Array(argument.utf8)
            if let option = pending {
                pending = nil
                ranges += secret(ofValue: bytes, offset: 0, for: option).map { (index, $0) }
                continue
            }
            if credentialOptions.contains(argument) || headerOptions.contains(argument) || urlOptions.contains(argument)
            {
                pending = argument
                continue
            }
            if let equals = bytes.firstIndex(of: UInt8(ascii: "=")), argument.hasPrefix("-") {
                let option = String(decoding: bytes[..<equals], as: UTF8.self)
                if credentialOptions.contains(option) || headerOptions.contains(option) || urlOptions.contains(option) {
                    ranges += secret(ofValue: Array(bytes[(equals + 1)...]), offset: equals + 1, for: option)
                        .map { (index, $0) }
                    continue
                }
            }
            if argument.hasPrefix("-"), !argument.hasPrefix("--"),
                let letter = bytes.indices.dropFirst().first(where: { shortOptions[bytes[$0]] != nil }),
                let option = shortOptions[bytes[letter]]
            {
                // `-uUSER:PASSWORD`, `-kuUSER:PASSWORD`, or the group's last letter with its value next (`-ku V`).
                if letter + 1 < bytes.count {
                    ranges += secret(ofValue: Array(bytes[(letter + 1)...]), offset: letter + 1, for: option)
                        .map { (index, $0) }
                } else {
                    pending = option
                }
                continue
            }
            if let password = URLText.passwordRange(in: bytes, requiringScheme: true) {
                ranges.append((index, password))
            }
        }
        return ranges
    }

    /// The secret in `value`, an argument of `option`, shifted by `offset`: the password of `USER:PASSWORD` or of a
    /// URL, or the value of a header field that carries a secret, whatever follows its name (a colon or not).
    private static func secret(ofValue value: [UInt8], offset: Int, for option: String) -> [Range<Int>] {
        if urlOptions.contains(option) {
            return URLText.passwordRange(in: value).map { [($0.lowerBound + offset)..<($0.upperBound + offset)] } ?? []
        }
        if credentialOptions.contains(option) {
            guard let colon = value.firstIndex(of: UInt8(ascii: ":")), colon + 1 < value.count else { return [] }
            return [(colon + 1 + offset)..<(value.count + offset)]
        }
        let start = value.firstIndex { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") } ?? value.count
        let end = value[start...].firstIndex {
            $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t")
        }
        guard let end, end + 1 < value.count,
            DownloadRequest.isSecretField(String(decoding: value[start..<end], as: UTF8.self))
        else { return [] }
        return [(end + 1 + offset)..<(value.count + offset)]
    }
}
