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
    /// The call's `params` is not an array (JSON-RPC's own code).
    public static func invalidParams(_ detail: String) -> RPCError { RPCError(code: -32602, detail) }
    /// A parameter is missing or of the wrong type: aria2 answers these with its generic code 1, as any other failure
    /// of a method.
    public static func badParameter(_ detail: String) -> RPCError { RPCError(code: 1, detail) }

    var json: JSON { ["code": .int(Int64(code)), "message": .string(message)] }
}

/// Answers JSON-RPC 2.0 calls the way aria2 does, with no I/O: one call or a batch in, the answer out, and whether
/// a call carried a wrong secret (the server then answers late, as aria2 does, to slow guessing).
///
/// Every `aria2.*` call but the two listings needs the secret as its first parameter, `"token:SECRET"`; a first
/// parameter starting with `token:` is taken off whether a secret is set or not. Calls inside `system.multicall`
/// carry their own. Methods themselves are the ``Methods``' business; a run of consecutive calls of one method named
/// in `together` (a batch or a multicall of thousands of `aria2.addUri`) is handed to ``RunMethods`` whole, so that
/// the run can be recorded at once rather than call by call.
public struct RPCEndpoint: Sendable {
    /// What answers the calls that passed the secret check.
    public typealias Methods = @Sendable (_ method: String, _ params: [JSON]) throws(RPCError) -> JSON
    /// What answers the calls that passed the secret check, told the WebSocket session a call came on (`nil` over
    /// HTTP), for methods that push to it.
    public typealias SessionMethods =
        @Sendable (_ method: String, _ params: [JSON], _ session: RPCSession?) throws(RPCError) -> JSON
    /// What answers the calls that passed the secret check, when an answer needs to wait (for a database).
    public typealias AsyncMethods = @Sendable (_ method: String, _ params: [JSON]) async throws(RPCError) -> JSON
    /// What answers a run of consecutive calls of one method, each call's parameters in order: one result per call,
    /// in the same order.
    public typealias RunMethods =
        @Sendable (_ method: String, _ calls: [[JSON]], _ session: RPCSession?) -> [Result<JSON, RPCError>]

    /// The secret every call must carry; `nil` for none (the daemon's `--rpc-no-secret`).
    private(set) var secret: RPCSecret?
    let methods: @Sendable (_ method: String, _ params: [JSON], _ session: RPCSession?) async throws(RPCError) -> JSON
    /// The methods whose consecutive calls are answered together, by `runMethods`.
    let together: Set<String>
    let runMethods: RunMethods?
    /// The methods answered without a secret.
    static let open: Set<String> = ["system.listMethods", "system.listNotifications"]
    /// The most calls in one batch or one `system.multicall`: each is answered in memory before the answer goes out,
    /// so a request of a million one-byte calls, with no secret, would otherwise cost the daemon hundreds of MiB.
    public static let maxCalls = 10_000

    /// An endpoint checking `secret` and answering with `methods`.
    public init(secret: RPCSecret?, methods: @escaping Methods) {
        self.init(secret: secret) { method, params, _ throws(RPCError) in try methods(method, params) }
    }

    /// An endpoint checking `secret` and answering with `methods`, which are told the session of each call; a run of
    /// consecutive calls of a method in `together` is answered by `runMethods` instead, in one go.
    public init(
        secret: RPCSecret?, sessionMethods: @escaping SessionMethods, together: Set<String> = [],
        runMethods: RunMethods? = nil
    ) {
        self.secret = secret
        self.methods = { method, params, session throws(RPCError) in try sessionMethods(method, params, session) }
        self.together = runMethods == nil ? [] : together
        self.runMethods = runMethods
    }

    /// An endpoint checking `secret` and answering with `methods`, which may wait.
    public init(secret: RPCSecret?, asyncMethods: @escaping AsyncMethods) {
        self.secret = secret
        self.methods = { method, params, _ throws(RPCError) in try await asyncMethods(method, params) }
        self.together = []
        self.runMethods = nil
    }

    /// The answer to `body`, one JSON-RPC call or a batch (`nil` when every call was a notification, which has no
    /// answer), and whether some call carried a wrong or no secret. `session` is the WebSocket session it came on;
    /// `signedIn` when it came from a page signed in to the dashboard, whose calls carry no secret (the page never
    /// holds it): a `token:` parameter is still taken off.
    public func handle(_ body: some Collection<UInt8> & Sendable, session: RPCSession? = nil, signedIn: Bool = false)
        async -> (answer: [UInt8]?, unauthorized: Bool)
    {
        let (answer, wrongSecrets) = await answer(body, session: session, signedIn: signedIn)
        return (answer, wrongSecrets > 0)
    }

    /// The answer to `body` (see ``handle(_:session:signedIn:)``) and how many of its calls carried a wrong or no
    /// secret: each is one guess, held back on its own (``RPCAccess/unauthorizedDelay``).
    package func answer(_ body: some Collection<UInt8> & Sendable, session: RPCSession? = nil, signedIn: Bool = false)
        async -> (answer: [UInt8]?, wrongSecrets: Int)
    {
        if signedIn, secret != nil {
            var open = self
            open.secret = nil
            return await open.answer(body, session: session)
        }
        let parsed: JSON
        do {
            parsed = try JSON.parse(body)
        } catch {
            return (Self.response(id: .null, error: .parseError).encoded(), 0)
        }
        var wrongSecrets = 0
        let requests: [JSON]
        switch parsed {
        case .array(let calls):
            guard !calls.isEmpty else { return (Self.response(id: .null, error: .invalidRequest).encoded(), 0) }
            // A multicall's calls count one by one: a batch of multicalls must not answer maxCalls times maxCalls.
            let total = calls.reduce(0) { $0 + Self.callCount(of: $1) }
            guard total <= Self.maxCalls else {
                return (Self.response(id: .null, error: Self.tooManyCalls(total, in: "a batch")).encoded(), 0)
            }
            requests = calls
        default: requests = [parsed]
        }
        // Each request read first (a malformed one answered as such), then the calls answered in order.
        var answers: [JSON?] = []
        var calls: [(index: Int, id: JSON?, step: Step)] = []
        for request in requests {
            answers.append(nil)
            guard let members = request.object, let method = members["method"]?.string else {
                answers[answers.count - 1] = Self.response(id: request.object?["id"] ?? .null, error: .invalidRequest)
                continue
            }
            let id = members["id"]
            let step: Step
            switch members["params"] {
            case nil, .null?: step = check(method, [], session: session, wrongSecrets: &wrongSecrets)
            case .array(let list)?: step = check(method, list, session: session, wrongSecrets: &wrongSecrets)
            default: step = .failed(.invalidParams("params must be an array"))
            }
            calls.append((answers.count - 1, id, step))
        }
        let results = await perform(calls.map(\.step), session: session, wrongSecrets: &wrongSecrets)
        for (call, result) in zip(calls, results) {
            guard let id = call.id else { continue }  // a notification
            switch result {
            case .success(let value): answers[call.index] = ["jsonrpc": "2.0", "id": id, "result": value]
            case .failure(let error): answers[call.index] = Self.response(id: id, error: error)
            }
        }
        if case .array = parsed {
            let given = answers.compactMap { $0 }
            return (given.isEmpty ? nil : JSON.array(given).encoded(), wrongSecrets)
        }
        return (answers[0]?.encoded(), wrongSecrets)
    }

    /// One call to answer: its secret checked and taken off, or already failed.
    private enum Step {
        case call(method: String, params: [JSON])
        case failed(RPCError)
    }

    /// Checks the secret of one call (its first parameter) and takes it off. `system.multicall` needs none of its
    /// own: each of its calls carries one. A call that passes the check vouches for its `session`.
    private func check(_ method: String, _ params: [JSON], session: RPCSession?, wrongSecrets: inout Int) -> Step {
        var params = params
        var token: String?
        if let first = params.first?.string, first.hasPrefix("token:") {
            token = String(first.dropFirst("token:".count))
            params.removeFirst()
        }
        if method != "system.multicall", !Self.open.contains(method) {
            if let secret {
                guard let token, secret.matches(token) else {
                    wrongSecrets += 1
                    return .failed(.unauthorized)
                }
            }
            session?.vouch()
        }
        return .call(method: method, params: params)
    }

    /// The results of `steps`, in order: consecutive calls of a method answered together go to `runMethods` as one
    /// run, every other call on its own.
    private func perform(_ steps: [Step], session: RPCSession?, wrongSecrets: inout Int) async
        -> [Result<JSON, RPCError>]
    {
        var results: [Result<JSON, RPCError>] = []
        results.reserveCapacity(steps.count)
        var run: (method: String, calls: [[JSON]])?
        func finishRun() {
            if let finished = run, let runMethods { results += runMethods(finished.method, finished.calls, session) }
            run = nil
        }
        for step in steps {
            if case .call(let method, let params) = step, together.contains(method) {
                if run?.method != method {
                    finishRun()
                    run = (method, [])
                }
                run?.calls.append(params)
                continue
            }
            finishRun()
            switch step {
            case .failed(let error): results.append(.failure(error))
            case .call(let method, let params):
                do throws(RPCError) {
                    if method == "system.multicall" {
                        results.append(
                            .success(try await multicall(params, session: session, wrongSecrets: &wrongSecrets)))
                    } else {
                        results.append(.success(try await methods(method, params, session)))
                    }
                } catch {
                    results.append(.failure(error))
                }
            }
        }
        finishRun()
        return results
    }

    /// `system.multicall([{methodName, params}, ...])`: each call's result in a one-element array, or its error
    /// object.
    private func multicall(_ params: [JSON], session: RPCSession?, wrongSecrets: inout Int) async throws(RPCError)
        -> JSON
    {
        guard params.count == 1, let calls = params[0].array else {
            throw .badParameter("system.multicall takes one array of calls")
        }
        guard calls.count <= Self.maxCalls else { throw Self.tooManyCalls(calls.count, in: "system.multicall") }
        let steps = calls.map { call -> Step in
            guard let members = call.object, let method = members["methodName"]?.string else {
                return .failed(.badParameter("each call needs a methodName"))
            }
            guard method != "system.multicall" else {
                return .failed(RPCError("Recursive system.multicall forbidden."))
            }
            return check(method, members["params"]?.array ?? [], session: session, wrongSecrets: &wrongSecrets)
        }
        return .array(
            await perform(steps, session: session, wrongSecrets: &wrongSecrets).map { result in
                switch result {
                case .success(let value): .array([value])
                case .failure(let error): error.json
                }
            })
    }

    /// How many calls `request` makes: one, or a `system.multicall`'s calls.
    static func callCount(of request: JSON) -> Int {
        guard let members = request.object, members["method"]?.string == "system.multicall",
            let calls = members["params"]?.array?.first?.array
        else { return 1 }
        return max(1, calls.count)
    }

    /// The error of a batch or multicall of `count` calls, over ``maxCalls``.
    static func tooManyCalls(_ count: Int, in what: String) -> RPCError {
        RPCError(code: -32600, "\(what) of \(count) calls: at most \(maxCalls) are answered at once; split it")
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

    /// The secret itself, for a server that checks it elsewhere (the daemon's `/metrics`, as a bearer token).
    package var value: String { String(decoding: bytes, as: UTF8.self) }

    /// A new random value for a secret or a token: `count` bytes from the system's generator, as lower-case hex.
    public static func randomValue(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// Whether `candidate` is the secret; the time taken depends on the candidate's length only.
    public func matches(_ candidate: String) -> Bool {
        let given = Array(candidate.utf8)
        var difference: UInt8 = given.count == bytes.count ? 0 : 1
        for index in given.indices {
            difference |= given[index] ^ bytes[index % bytes.count]
        }
        return difference == 0
    }
}
