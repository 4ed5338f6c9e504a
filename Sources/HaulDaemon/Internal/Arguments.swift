/// A method's parameters, read with aria2's errors for what is missing or of the wrong type.
struct Arguments {
    let method: String
    let params: [JSON]

    func optional(_ index: Int) -> JSON? {
        index < params.count && params[index] != .null ? params[index] : nil
    }

    func string(_ index: Int, _ name: String) throws(RPCError) -> String {
        guard let value = optional(index)?.string else {
            throw .badParameter("\(method): parameter \(index + 1) (\(name)) must be a string")
        }
        return value
    }

    func int(_ index: Int, _ name: String) throws(RPCError) -> Int64 {
        // aria2's clients send numbers as JSON numbers, and some as strings.
        guard let value = optional(index).flatMap({ $0.int ?? $0.string.flatMap { Int64($0) } }) else {
            throw .badParameter("\(method): parameter \(index + 1) (\(name)) must be an integer")
        }
        return value
    }

    /// An optional array of strings (`keys`).
    func strings(_ index: Int, _ name: String) throws(RPCError) -> [String]? {
        guard let value = optional(index) else { return nil }
        guard let list = value.array, case let strings = list.compactMap(\.string), strings.count == list.count else {
            throw .badParameter("\(method): parameter \(index + 1) (\(name)) must be an array of strings")
        }
        return strings
    }

    /// An optional options object: each value a string, or (for a cumulative option such as `header`) an array of
    /// strings.
    func options(_ index: Int) throws(RPCError) -> [String: [String]] {
        guard let value = optional(index) else { return [:] }
        guard let members = value.object else {
            throw .badParameter("\(method): parameter \(index + 1) (options) must be an object")
        }
        var options: [String: [String]] = [:]
        for (name, value) in members {
            switch value {
            case .string(let text): options[name] = [text]
            case .int(let number): options[name] = [String(number)]
            case .bool(let flag): options[name] = [flag ? "true" : "false"]
            case .array(let list) where list.allSatisfy({ $0.string != nil }): options[name] = list.compactMap(\.string)
            default: throw .badParameter("\(method): option '\(name)' must be a string")
            }
        }
        return options
    }
}
