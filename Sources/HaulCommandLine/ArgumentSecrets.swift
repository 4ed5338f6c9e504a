import Foundation
import Haul

/// Hides the secrets of the process's own arguments from other users: what `ps` and `/proc/PID/cmdline` show is the
/// argument vector's memory, which stays readable for the whole run. As curl blanks `-u`, the password of
/// `-u/--user USER:PASSWORD`, of every URL with one (`https://user:password@...`, `-x`, `--db`) and the value of a
/// `--header` that carries a secret (`DownloadRequest.isSecretField(_:)`: `Authorization`, `Cookie`, `X-Api-Key`...)
/// are overwritten with `*` in place, once
/// the arguments have been copied for parsing. Lengths stay, so nothing moves.
enum ArgumentSecrets {
    /// The options whose next argument (or `=`-joined value) is `USER:PASSWORD`.
    static let credentialOptions: Set<String> = ["-u", "--user"]
    /// The options whose value is a header field.
    static let headerOptions: Set<String> = ["--header"]
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
            if credentialOptions.contains(argument) || headerOptions.contains(argument) {
                pending = argument
                continue
            }
            if let equals = bytes.firstIndex(of: UInt8(ascii: "=")), argument.hasPrefix("-") {
                let option = String(decoding: bytes[..<equals], as: UTF8.self)
                if credentialOptions.contains(option) || headerOptions.contains(option) {
                    ranges += secret(ofValue: Array(bytes[(equals + 1)...]), offset: equals + 1, for: option)
                        .map { (index, $0) }
                    continue
                }
            }
            if argument.hasPrefix("-u"), !argument.hasPrefix("--"), bytes.count > 2 {
                ranges += secret(ofValue: Array(bytes[2...]), offset: 2, for: "-u").map { (index, $0) }
                continue
            }
            if let password = urlPassword(in: bytes) { ranges.append((index, password)) }
        }
        return ranges
    }

    /// The secret in `value`, an argument of `option` (a credential or a header option), shifted by `offset`.
    private static func secret(ofValue value: [UInt8], offset: Int, for option: String) -> [Range<Int>] {
        // After the first colon: the password of `USER:PASSWORD`, or a header's value (of one that carries a secret).
        guard let colon = value.firstIndex(of: UInt8(ascii: ":")), colon + 1 < value.count else { return [] }
        if !credentialOptions.contains(option) {
            let name = String(decoding: value[..<colon], as: UTF8.self).trimmingCharacters(in: .whitespaces)
            guard DownloadRequest.isSecretField(name) else { return [] }
        }
        return [(colon + 1 + offset)..<(value.count + offset)]
    }

    /// The password of a URL's user info (`scheme://user:password@host`), if `bytes` holds one.
    static func urlPassword(in bytes: [UInt8]) -> Range<Int>? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let scheme = text.range(of: "://") else { return nil }
        let start = text.utf8.distance(from: text.startIndex, to: scheme.upperBound)
        // The authority ends at the first `/`, `?` or `#`; its user info at its last `@`.
        let authorityEnd =
            bytes[start...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }
            ?? bytes.count
        guard let at = bytes[start..<authorityEnd].lastIndex(of: UInt8(ascii: "@")),
            let colon = bytes[start..<at].firstIndex(of: UInt8(ascii: ":")), colon + 1 < at
        else { return nil }
        return (colon + 1)..<at
    }
}
