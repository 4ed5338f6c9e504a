import Foundation
import Haul

/// Numbers as people read them in a progress line: short and of steady width.
enum Format {
    /// `812 B`, `12.3 KiB`, `4.0 MiB`, `1.25 GiB`.
    static func bytes(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(count) B" }
        let digits = value < 10 ? 2 : value < 100 ? 1 : 0
        return String(format: "%.\(digits)f %@", value, units[unit])
    }

    /// `3.2 MiB/s`.
    static func speed(_ bytesPerSecond: Double) -> String {
        guard bytesPerSecond.isFinite, bytesPerSecond > 0 else { return "-- B/s" }
        return bytes(Int64(bytesPerSecond)) + "/s"
    }

    /// `0:09`, `12:30`, `1:02:03`; `--:--` when unknown.
    static func clock(_ duration: Duration?) -> String {
        guard let duration else { return "--:--" }
        // Rounded up: "0:00" while bytes are still to come would read as done.
        let seconds = max(0, Int(duration.seconds.rounded(.up)))
        if seconds >= 360_000 { return ">99h" }
        let (hours, minutes, secs) = (seconds / 3600, seconds / 60 % 60, seconds % 60)
        return hours > 0
            ? String(format: "%d:%02d:%02d", hours, minutes, secs) : String(format: "%d:%02d", minutes, secs)
    }

    /// Why a request waits, in words.
    static func throttleReason(_ reason: ThrottleReason) -> String {
        switch reason {
        case .requestRate: "request rate"
        case .hostWait: "wait between requests to the host"
        case .retryAfter: "the server asked for time (Retry-After)"
        }
    }

    /// One connection's segment event, in words: `connection 2, bytes 1048576-2097151 from URL: started`.
    static func segment(_ event: SegmentEvent) -> String {
        let range =
            event.range.isEmpty ? "" : ", bytes \(event.range.lowerBound)-\(event.range.upperBound - 1)"
        let what =
            switch event.change {
            case .started: "started"
            case .finished: "finished"
            case .failed(let error): "failed: \(error.message)"
            case .sourceDropped(let reason): "source dropped for the rest of the file: \(reason)"
            }
        return "connection \(event.connection + 1)\(range) from \(event.url.redactedString): \(what)"
    }

    /// A source a download dropped, and the one it goes on from.
    static func sourceDropped(url: URL, reason: String, next: URL) -> String {
        "source \(url.redactedString) dropped: \(reason); next: \(next.redactedString)"
    }

    /// `0.42 s`, `12.3 s`, `2 min 05 s`.
    static func elapsed(_ duration: Duration) -> String {
        let seconds = duration.seconds
        if seconds < 10 { return String(format: "%.2f s", seconds) }
        if seconds < 60 { return String(format: "%.1f s", seconds) }
        return String(format: "%d min %02d s", Int(seconds) / 60, Int(seconds) % 60)
    }

    /// `text` with every control and bidirectional formatting character other than line feed and tab replaced by
    /// U+FFFD: names, URLs and server messages can carry them, and printed raw they would move the cursor, change
    /// the terminal's state, or make `‮txt.exe` display as `exe.txt`.
    static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isReplaced) else { return text }
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars { scalars.append(isReplaced(scalar) ? "\u{FFFD}" : scalar) }
        return String(scalars)
    }

    /// ``printable(_:)`` on one line: a line feed is replaced too, for text from outside (a server's message, a
    /// worker's name in the shared queue) printed inside a line of our own, which it must not end and add lines to.
    static func oneLine(_ text: String) -> String {
        String(printable(text).map { $0 == "\n" ? "\u{FFFD}" : $0 })
    }

    /// Whether `scalar` is one JSON allows raw in a string that a terminal or a line reader takes as a control: DEL,
    /// the C1 controls, the line and paragraph separators. Both JSON outputs (`--json`, `--log-format json`) escape
    /// them.
    static func isRawInJSONButNotPrintable(_ scalar: Unicode.Scalar) -> Bool {
        (0x7F...0x9F).contains(scalar.value) || scalar == "\u{2028}" || scalar == "\u{2029}"
    }

    private static func isReplaced(_ scalar: Unicode.Scalar) -> Bool {
        scalar != "\n" && scalar != "\t" && FileNaming.isUnprintable(scalar)
    }

    /// Columns `text` takes on a terminal: wide (East Asian, emoji) characters take two, combining marks none.
    static func width(_ text: String) -> Int {
        text.unicodeScalars.reduce(0) { $0 + width(of: $1) }
    }

    private static func width(of scalar: Unicode.Scalar) -> Int {
        let value = scalar.value
        if value < 0x20 || (0x7f..<0xa0).contains(value) { return 0 }
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return 0
        default: break
        }
        let wide: [ClosedRange<UInt32>] = [
            0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
            0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x1F300...0x1F64F,
            0x1F900...0x1F9FF, 0x20000...0x3FFFD,
        ]
        return wide.contains { $0.contains(value) } ? 2 : 1
    }

    /// `text` cut to at most `columns` columns, ending in `…` when cut.
    static func fit(_ text: String, columns: Int) -> String {
        guard columns > 0 else { return "" }
        if width(text) <= columns { return text }
        var out = ""
        var used = 0
        for character in text {
            let characterWidth = width(String(character))
            if used + characterWidth > columns - 1 { break }
            out.append(character)
            used += characterWidth
        }
        return out + "…"
    }

    /// `text` padded with spaces to `columns` columns (never cut).
    static func pad(_ text: String, columns: Int) -> String {
        text + String(repeating: " ", count: max(0, columns - width(text)))
    }

    /// A bar of `columns` columns: `[#####-----]`.
    static func bar(_ fraction: Double?, columns: Int) -> String {
        let inner = max(0, columns - 2)
        guard let fraction else { return "[" + String(repeating: "·", count: inner) + "]" }
        let filled = Int((min(max(fraction, 0), 1) * Double(inner)).rounded(.down))
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: inner - filled) + "]"
    }
}
