import Foundation
import Haul
import HaulAsyncHTTPClient
import HaulNIO
import HaulOperations
import HaulTestServer
import HaulTestSupport
import HaulURLSession
import Testing

/// The transports every engine test runs against, over `http` and, for those that speak TLS, over `https` (a
/// server with a certificate from the test CA, a downloader that trusts it).
enum TransportKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case asyncHTTPClient
    case urlSession
    case nio
    case asyncHTTPClientOverTLS = "asyncHTTPClient-https"
    case nioOverTLS = "nio-https"

    var testDescription: String { rawValue }

    /// Whether the server speaks TLS.
    var usesTLS: Bool { self == .asyncHTTPClientOverTLS || self == .nioOverTLS }

    func makeTransport() -> any HTTPTransport {
        switch self {
        case .asyncHTTPClient, .asyncHTTPClientOverTLS: AsyncHTTPClientTransport.shared
        case .urlSession: URLSessionTransport()
        case .nio: NIOTransport()
        case .nioOverTLS: NIOTransport(fallback: AsyncHTTPClientTransport.shared)
        }
    }

    /// `configuration`, serving HTTPS when this kind uses TLS.
    func server(_ configuration: TestServer.Configuration = .init()) -> TestServer.Configuration {
        usesTLS ? TestTLS.server(configuration) : configuration
    }

    /// The engine's test configuration (see `testConfiguration`), trusting the test CA when this kind uses TLS.
    func configuration(clock: any BackoffClock = RecordingClock(), retries: Int = 3) -> Downloader.Configuration {
        var configuration = testConfiguration(clock: clock, retries: retries)
        if usesTLS { configuration.tls = TestTLS.settings }
        return configuration
    }
}

/// A backoff clock whose sleeps last until the task is cancelled; `entered` opens when a sleep begins.
final class BlockingClock: BackoffClock {
    let entered = Gate<Void>()
    func sleep(for duration: Duration) async throws {
        entered.open()
        try await Task.sleep(for: .seconds(3600))
    }
}
