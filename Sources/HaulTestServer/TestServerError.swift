/// Why a ``TestServer`` could not start.
public struct TestServerError: Error, CustomStringConvertible, Sendable {
    private enum Code: Sendable {
        case alreadyStarted
        case rootNotFound(String)
        case bindFailed(host: String, port: Int, underlying: String)
        case tlsSetupFailed(String)
    }

    private let code: Code

    static let alreadyStarted = TestServerError(code: .alreadyStarted)

    static func rootNotFound(_ path: String) -> TestServerError { TestServerError(code: .rootNotFound(path)) }

    static func bindFailed(host: String, port: Int, underlying: any Error) -> TestServerError {
        TestServerError(code: .bindFailed(host: host, port: port, underlying: String(describing: underlying)))
    }

    static func tlsSetupFailed(underlying: any Error) -> TestServerError {
        TestServerError(code: .tlsSetupFailed(String(describing: underlying)))
    }

    /// A message saying what happened and what to do.
    public var description: String {
        switch code {
        case .alreadyStarted:
            "The test server was already started; create a new TestServer for another run."
        case .rootNotFound(let path):
            "The directory to serve does not exist: \(path). Pass an existing directory."
        case .bindFailed(let host, let port, let underlying):
            "Could not listen on \(host):\(port) (\(underlying)). Pick another port, or 0 for a free one."
        case .tlsSetupFailed(let underlying):
            "Could not make the server's TLS certificate and context (\(underlying))."
        }
    }
}
