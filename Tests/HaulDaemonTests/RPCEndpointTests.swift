import Foundation
import Haul
import HaulDaemon
import HaulTestSupport
import Testing

/// The JSON-RPC layer with no I/O: aria2's framing, secrets, batches and multicall, and its error objects.
@Suite("RPC endpoint (no I/O)")
struct RPCEndpointTests {
    let endpoint = RPCEndpoint(secret: RPCSecret("s3cret")) { method, params throws(RPCError) in
        switch method {
        case "aria2.echo": return .array(params)
        case "aria2.fail": throw RPCError("it failed")
        case "system.listMethods": return ["aria2.echo"]
        default: throw RPCError("No such method: \(method)")
        }
    }

    private func call(_ text: String) async throws -> (JSON?, Bool) {
        let (answer, unauthorized) = await endpoint.handle(Array(text.utf8))
        return (try answer.map { try JSON.parse($0) }, unauthorized)
    }

    @Test("a call with the secret is answered; the token is taken off the parameters")
    func authorized() async throws {
        let (answer, unauthorized) = try await call(
            #"{"jsonrpc":"2.0","id":"q","method":"aria2.echo","params":["token:s3cret",1,"a"]}"#)
        #expect(!unauthorized)
        #expect(answer == ["jsonrpc": "2.0", "id": "q", "result": [.int(1), "a"]])
    }

    @Test("a wrong, missing or empty secret is 'Unauthorized' (code 1), flagged to be answered late")
    func unauthorized() async throws {
        for params in [#"["token:nope"]"#, "[]", #"["token:"]"#, #"["token:s3cret0"]"#, #"["s3cret"]"#] {
            let (answer, unauthorized) = try await call(
                #"{"jsonrpc":"2.0","id":1,"method":"aria2.echo","params":\#(params)}"#)
            #expect(unauthorized, "\(params)")
            #expect(answer?.object?["error"] == ["code": .int(1), "message": "Unauthorized"], "\(params)")
        }
        // The listings need none.
        let (listing, flagged) = try await call(#"{"jsonrpc":"2.0","id":1,"method":"system.listMethods"}"#)
        #expect(!flagged && listing?.object?["result"] == ["aria2.echo"])
    }

    @Test("malformed input: parse error, invalid request, params not an array; a notification gets no answer")
    func malformed() async throws {
        #expect(try await call("{nope").0?.object?["error"]?.object?["code"] == .int(-32700))
        #expect(try await call("[]").0?.object?["error"]?.object?["code"] == .int(-32600))
        #expect(try await call(#"{"id":1,"params":[]}"#).0?.object?["error"]?.object?["code"] == .int(-32600))
        #expect(
            try await call(#"{"id":1,"method":"aria2.echo","params":{"a":1}}"#).0?.object?["error"]?.object?["code"]
                == .int(-32602))
        #expect(try await call(#"{"method":"aria2.echo","params":["token:s3cret"]}"#).0 == nil)
        #expect(
            try await call(#"{"id":7,"method":"aria2.nothing","params":["token:s3cret"]}"#).0?.object?["error"]
                == ["code": .int(1), "message": "No such method: aria2.nothing"])
    }

    @Test("a batch answers each call in order; a wrong secret in one flags the whole answer")
    func batch() async throws {
        let (answer, unauthorized) = try await call(
            #"[{"id":1,"method":"aria2.echo","params":["token:s3cret","x"]},{"id":2,"method":"aria2.fail","params":["token:s3cret"]},{"id":3,"method":"aria2.echo","params":["token:bad"]}]"#
        )
        let answers = try #require(answer?.array)
        #expect(answers.count == 3 && unauthorized)
        #expect(answers[0].object?["result"] == ["x"])
        #expect(answers[1].object?["error"] == ["code": .int(1), "message": "it failed"])
        #expect(answers[2].object?["error"]?.object?["message"] == "Unauthorized")
    }

    @Test("system.multicall: each call carries its own token; results in one-element arrays, failures as objects")
    func multicall() async throws {
        let (answer, unauthorized) = try await call(
            #"{"id":"m","method":"system.multicall","params":[[{"methodName":"aria2.echo","params":["token:s3cret",5]},{"methodName":"aria2.fail","params":["token:s3cret"]},{"methodName":"aria2.echo","params":[]},{"methodName":"system.multicall","params":[[]]}]]}"#
        )
        let results = try #require(answer?.object?["result"]?.array)
        #expect(results.count == 4 && unauthorized)
        #expect(results[0] == [[.int(5)]])
        #expect(results[1] == ["code": .int(1), "message": "it failed"])
        #expect(results[2] == ["code": .int(1), "message": "Unauthorized"])
        #expect(results[3].object?["code"] == .int(1))
    }

    @Test("consecutive calls of a method answered together go as one run, in batches and multicalls alike")
    func runs() async throws {
        let runs = Locked<[[JSON]]>([])
        let endpoint = RPCEndpoint(
            secret: RPCSecret("s3cret"),
            sessionMethods: { method, params, _ throws(RPCError) in
                guard method == "aria2.echo" else { throw RPCError("No such method: \(method)") }
                return .array(params)
            },
            together: ["aria2.add"],
            runMethods: { _, calls, _ in
                runs.withLock { $0.append(calls.map { JSON.array($0) }) }
                return calls.map { params in params.first == "bad" ? .failure(RPCError("refused")) : .success(params[0])
                }
            })
        func call(_ text: String) async throws -> JSON? {
            try await endpoint.handle(Array(text.utf8)).answer.map { try JSON.parse($0) }
        }
        // A multicall: two adds, an echo between runs, a wrong secret (no side effect, but it ends the run), two more.
        let multicall = try await call(
            #"{"id":1,"method":"system.multicall","params":[[{"methodName":"aria2.add","params":["token:s3cret","a"]},{"methodName":"aria2.add","params":["token:s3cret","bad"]},{"methodName":"aria2.echo","params":["token:s3cret","e"]},{"methodName":"aria2.add","params":["token:s3cret","c"]},{"methodName":"aria2.add","params":["token:nope","x"]},{"methodName":"aria2.add","params":["token:s3cret","d"]},{"methodName":"aria2.add","params":["token:s3cret","f"]}]]}"#
        )
        #expect(
            multicall?.object?["result"]
                == [
                    ["a"], ["code": .int(1), "message": "refused"], [["e"]], ["c"],
                    ["code": .int(1), "message": "Unauthorized"], ["d"], ["f"],
                ])
        #expect(runs.withLock { $0 } == [[["a"], ["bad"]], [["c"]], [["d"], ["f"]]])
        // A batch: a run with a notification in it (done, not answered), then an invalid request.
        runs.withLock { $0 = [] }
        let batch = try await call(
            #"[{"id":1,"method":"aria2.add","params":["token:s3cret","g"]},{"method":"aria2.add","params":["token:s3cret","h"]},{"id":3,"method":"aria2.add","params":["token:s3cret","i"]},{"id":4}]"#
        )
        #expect(batch?.array?.count == 3)
        #expect(batch?.array?[0].object?["result"] == "g" && batch?.array?[1].object?["result"] == "i")
        #expect(batch?.array?[2].object?["error"]?.object?["code"] == .int(-32600))
        #expect(runs.withLock { $0 } == [[["g"], ["h"], ["i"]]])
    }

    @Test("every call with a wrong secret counts as one guess, in a batch or a multicall, and is held back on its own")
    func guessesCounted() async throws {
        func echo(_ token: String, id: Int) -> String {
            #"{"jsonrpc":"2.0","id":\#(id),"method":"aria2.echo","params":["token:\#(token)",\#(id)]}"#
        }
        let guesses = (0..<5).map { echo("guess\($0)", id: $0) } + [echo("s3cret", id: 5)]
        let (_, batch) = await endpoint.answer(Array(("[" + guesses.joined(separator: ",") + "]").utf8))
        #expect(batch == 5)
        let multicall =
            #"{"jsonrpc":"2.0","id":"m","method":"system.multicall","params":[["#
            + [
                #"{"methodName":"aria2.echo","params":["token:no",1]}"#,
                #"{"methodName":"aria2.echo","params":["token:s3cret",2]}"#,
                #"{"methodName":"aria2.echo","params":[3]}"#,
            ].joined(separator: ",") + "]]}"
        let (_, inMulticall) = await endpoint.answer(Array(multicall.utf8))
        #expect(inMulticall == 2)
        let (_, none) = await endpoint.answer(Array(echo("s3cret", id: 1).utf8))
        #expect(none == 0)
    }

    @Test("a batch or a multicall of more calls than the limit is refused whole, with no answer per call")
    func tooManyCalls() async throws {
        let ones = Array(repeating: "1", count: RPCEndpoint.maxCalls + 1).joined(separator: ",")
        let (batch, _) = try await call("[" + ones + "]")
        #expect(batch?.object?["error"]?.object?["code"] == .int(-32600))
        #expect(batch?.object?["error"]?.object?["message"]?.string?.contains("at most 10000") == true)
        let calls = Array(
            repeating: #"{"methodName":"aria2.echo","params":["token:s3cret"]}"#, count: RPCEndpoint.maxCalls + 1)
        let (multicall, _) = try await call(
            #"{"jsonrpc":"2.0","id":1,"method":"system.multicall","params":[["# + calls.joined(separator: ",") + "]]}")
        #expect(multicall?.object?["error"]?.object?["message"]?.string?.contains("system.multicall of 10001") == true)
        // At the limit: every call answered.
        let (full, _) = try await call(
            "[" + Array(repeating: "1", count: RPCEndpoint.maxCalls).joined(separator: ",") + "]")
        #expect(full?.array?.count == RPCEndpoint.maxCalls)
    }

    @Test("the secret is compared whole: a prefix, an extension or another length never matches")
    func secretComparison() async throws {
        let secret = try #require(RPCSecret("abc"))
        #expect(secret.matches("abc"))
        for wrong in ["", "ab", "abcd", "abd", "ABC", "abcabc"] { #expect(!secret.matches(wrong), "\(wrong)") }
        // Lengths that differ by a multiple of 256: the secret repeated is another length too.
        let repeated = String(repeating: "abc", count: 86) + "a"
        #expect(!secret.matches(repeated))
        #expect(!secret.matches(String(repeating: "abc", count: 257)))
        #expect(RPCSecret("") == nil)
    }
}
