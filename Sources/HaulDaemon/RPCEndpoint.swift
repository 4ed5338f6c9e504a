import Foundation

/// An error a method answers with: aria2's `{"code": 1, "message": ...}` for a method's own failures, JSON-RPC's
/// negative codes for malformed calls.
public struct RPCError: Error, Sendable, Hashable {
    /// The JSON-RPC error code.
    public var code: Int
    /// What went wrong, for the caller.
    public var message: String

    /// An error with `code` and `message`.
    public init(code: Int = 1, _ message: String) {
        self.code = code
        self.message = message
    }

    /// A wrong or missing secret: the exact message aria2's front ends look for.
    public static let unauthorized = RPCError("Unauthorized")
    /// The body is not JSON.
    public static let parseError = RPCError(code: -32700, "Parse error.")
    /// The JSON is not a JSON-RPC call.
    public static let invalidRequest = RPCError(code: -32600, "Invalid Request.")
    /// The parameters are not what the method takes.
    public static func invalidParams(_ detail: String) -> RPCError { RPCError(code: -32602, detail) }

    var json: JSON { ["code": .int(Int64(code)), "message": .string(message)] }
}

/// Answers JSON-RPC 2.0 calls the way aria2 does, with no I/O: one call or a batch in, the answer out, and whether
/// a call carried a wrong secret (the server then answers late, as aria2 does, to slow guessing).
///
/// Every `aria2.*` call but the two listings needs the secret as its first parameter, `"token:SECRET"`; a first
/// parameter starting with `token:` is taken off whether a secret is set or not. Calls inside `system.multicall`
/// carry their own. Methods themselves are the ``Methods``' business.
public struct RPCEndpoint: Sendable {
    /// What answers the calls that passed the secret check.
    public typealias Methods = @Sendable (_ method: String, _ params: [JSON]) throws(RPCError) -> JSON
    /// What answers the calls that passed the secret check, told the WebSocket session a call came on (`nil` over
    /// HTTP), for methods that push to it.
    public typealias SessionMethods =
        @Sendable (_ method: String, _ params: [JSON], _ session: RPCSession?) throws(RPCError) -> JSON

    /// The secret every call must carry; `nil` for none (the daemon's `--rpc-no-secret`).
    let secret: RPCSecret?
    let methods: SessionMethods
    /// The methods answered without a secret.
    static let open: Set<String> = ["system.listMethods", "system.listNotifications"]

    /// An endpoint checking `secret` and answering with `methods`.
    public init(secret: RPCSecret?, methods: @escaping Methods) {
        self.secret = secret
        self.methods = { method, params, _ throws(RPCError) in try methods(method, params) }
    }

    /// An endpoint checking `secret` and answering with `methods`, which are told the session of each call.
    public init(secret: RPCSecret?, sessionMethods: @escaping SessionMethods) {
        self.secret = secret
        self.methods = sessionMethods
    }

    /// The answer to `body`, one JSON-RPC call or a batch (`nil` when every call was a notification, which has no
    /// answer), and whether some call carried a wrong or no secret. `session` is the WebSocket session it came on.
    public func handle(_ body: some Collection<UInt8>, session: RPCSession? = nil) -> (
        answer: [UInt8]?, unauthorized: Bool
    ) {
        let parsed: JSON
        do {
            parsed = try JSON.parse(body)
        } catch {
            return (Self.response(id: .null, error: .parseError).encoded(), false)
        }
        var unauthorized = false
        switch parsed {
        case .array(let calls):
            guard !calls.isEmpty else { return (Self.response(id: .null, error: .invalidRequest).encoded(), false) }
            let answers = calls.compactMap { answer(to: $0, session: session, unauthorized: &unauthorized) }
            return (answers.isEmpty ? nil : JSON.array(answers).encoded(), unauthorized)
        default:
            let answer = answer(to: parsed, session: session, unauthorized: &unauthorized)
            return (answer?.encoded(), unauthorized)
        }
    }

    /// The answer to one call, `nil` for a notification (no `id`).
    private func answer(to request: JSON, session: RPCSession?, unauthorized: inout Bool) -> JSON? {
        guard let members = request.object, let method = members["method"]?.string else {
            return Self.response(id: request.object?["id"] ?? .null, error: .invalidRequest)
        }
        let id = members["id"]
        let params: [JSON]
        switch members["params"] {
        case nil, .null?: params = []
        case .array(let list)?: params = list
        default: return id.map { Self.response(id: $0, error: .invalidParams("params must be an array")) }
        }
        let result: Result<JSON, RPCError>
        do throws(RPCError) {
            result = .success(try dispatch(method, params, session: session, unauthorized: &unauthorized))
        } catch {
            result = .failure(error)
        }
        guard let id else { return nil }
        switch result {
        case .success(let value): return ["jsonrpc": "2.0", "id": id, "result": value]
        case .failure(let error): return Self.response(id: id, error: error)
        }
    }

    /// Checks the secret of one call (its first parameter) and answers it.
    private func dispatch(
        _ method: String, _ params: [JSON], session: RPCSession?, unauthorized: inout Bool
    ) throws(RPCError) -> JSON {
        var params = params
        var token: String?
        if let first = params.first?.string, first.hasPrefix("token:") {
            token = String(first.dropFirst("token:".count))
            params.removeFirst()
        }
        if method == "system.multicall" { return try multicall(params, session: session, unauthorized: &unauthorized) }
        if let secret, !Self.open.contains(method) {
            guard let token, secret.matches(token) else {
                unauthorized = true
                throw .unauthorized
            }
        }
        return try methods(method, params, session)
    }

    /// `system.multicall([{methodName, params}, ...])`: each call's result in a one-element array, or its error
    /// object.
    private func multicall(_ params: [JSON], session: RPCSession?, unauthorized: inout Bool) throws(RPCError) -> JSON {
        guard params.count == 1, let calls = params[0].array else {
            throw .invalidParams("system.multicall takes one array of calls")
        }
        var results: [JSON] = []
        for call in calls {
            guard let members = call.object, let method = members["methodName"]?.string else {
                results.append(RPCError.invalidParams("each call needs a methodName").json)
                continue
            }
            guard method != "system.multicall" else {
                results.append(RPCError("Recursive system.multicall forbidden.").json)
                continue
            }
            do throws(RPCError) {
                let inner = members["params"]?.array ?? []
                results.append(
                    .array([try dispatch(method, inner, session: session, unauthorized: &unauthorized)]))
            } catch {
                results.append(error.json)
            }
        }
        return .array(results)
    }

    static func response(id: JSON, error: RPCError) -> JSON {
        ["jsonrpc": "2.0", "id": id, "error": error.json]
    }
}

/// The RPC secret, compared in constant time: a caller learns nothing from how long a wrong guess takes.
public struct RPCSecret: Sendable {
    private let bytes: [UInt8]

    /// A secret of `value` (not empty).
    public init?(_ value: String) {
        guard !value.isEmpty else { return nil }
        bytes = Array(value.utf8)
    }

    /// Whether `candidate` is the secret; the time taken depends on the candidate's length only.
    public func matches(_ candidate: String) -> Bool {
        let given = Array(candidate.utf8)
        var difference = UInt8(truncatingIfNeeded: given.count ^ bytes.count)
        for index in given.indices {
            difference |= given[index] ^ bytes[index % bytes.count]
        }
        return difference == 0
    }
}
