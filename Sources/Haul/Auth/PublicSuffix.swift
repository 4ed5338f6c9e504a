/// The Public Suffix List (https://publicsuffix.org): the domains under which anybody may register a name (`com`,
/// `co.uk`, and private ones such as `github.io`), for which no cookie may be set (RFC 6265 5.3 step 5). A snapshot
/// is compiled in (`PublicSuffixes.swift`, made by `scripts/public-suffixes` from Debian's `publicsuffix`), as Go's
/// `x/net/publicsuffix` does: the same answer on every platform (Apple's systems ship no copy to read), with no file
/// to find at run time. Rules are read into sets at the first question.
enum PublicSuffixes {
    private struct Rules {
        var exact: Set<String> = []
        /// `X` for a rule `*.X`: every `label.X` is a suffix.
        var wildcards: Set<String> = []
        /// `X` for a rule `!X`: not a suffix, whatever a wildcard says.
        var exceptions: Set<String> = []
    }

    private static let parsed: Rules = {
        var parsed = Rules()
        for line in rules.split(separator: "\n") {
            if line.hasPrefix("!") {
                parsed.exceptions.insert(String(line.dropFirst()))
            } else if line.hasPrefix("*.") {
                parsed.wildcards.insert(String(line.dropFirst(2)))
            } else {
                parsed.exact.insert(String(line))
            }
        }
        return parsed
    }()

    /// Whether `domain` (a host name, lowercase, without a trailing dot) is a public suffix: a rule names it, or a
    /// wildcard rule covers it and no exception does; a name of one label always is (the list's default rule `*`).
    static func isPublicSuffix(_ domain: String) -> Bool {
        let domain = domain.hasSuffix(".") ? String(domain.dropLast()) : domain
        guard let dot = domain.firstIndex(of: ".") else { return true }
        let rules = parsed
        if rules.exceptions.contains(domain) { return false }
        if rules.exact.contains(domain) { return true }
        return rules.wildcards.contains(String(domain[domain.index(after: dot)...]))
    }
}
