public import HTTPTypes
public import Haul
import HaulOperations

#if canImport(FoundationNetworking)
import Foundation
public import FoundationNetworking
#else
public import Foundation
#endif

/// A transport on URLSession *data* tasks streamed through a delegate: the default on Apple platforms.
///
/// It never uses `URLSessionDownloadTask` (on Linux that crashes the process on a full disk, leaks temporary
/// files and writes every chunk twice), refuses redirects itself so the engine applies its own rules, sends
/// `Accept-Encoding: identity`, and (on Apple platforms) suspends the task while the engine is behind so memory
/// stays bounded; on Linux, FoundationNetworking cannot be suspended mid-transfer, so there it cannot push back.
/// URLSession decodes `Content-Encoding` on its own, so a 2xx response that is encoded anyway fails with
/// `DownloadError.Code.transport`, not retried, instead of being stored decoded (use AsyncHTTPClient to store it as
/// sent); a redirect or an error status, whose body is never stored, goes to the engine whatever its encoding.
///
/// A response is closed (`ResponseBody.close()`) once URLSession reports its task complete. URLSession closes a
/// cancelled transfer's connection on its own queue and does not say when, so a `DownloadQueue` on this transport
/// can free a cancelled download's slot while a server still counts its request.
public final class URLSessionTransport: HTTPTransport {
    /// The session new requests go to, with its delegate and configuration. When the connection limit rises it is
    /// replaced (URLSession fixes a session's configuration when it is made); the old one finishes its tasks and is
    /// invalidated then.
    private let current: Locked<Current>
    private typealias Current = (
        session: URLSession, delegate: StreamingDelegate, configuration: URLSessionConfiguration
    )
    /// The identifier of a background configuration, which this transport refuses
    /// (see ``init(configuration:maximumConnectionsPerHost:)``).
    private let backgroundIdentifier: String?

    /// Creates a transport with its own session on `configuration` (ephemeral by default: no cookies, no
    /// cache, nothing shared with other sessions).
    ///
    /// A background configuration (`URLSessionConfiguration.background(withIdentifier:)`) is refused: every request
    /// fails with a permanent error that says so. A background session hands its transfers to the system, which
    /// delivers a *download* task's file after the app was suspended or relaunched; this transport streams *data*
    /// tasks through a delegate in this process, which a background session does not run. (A background download on
    /// iOS needs another transport: download tasks with a delegate set up again at every launch, the app delegate's
    /// `handleEventsForBackgroundURLSession` completion handler called once the session's events are delivered, and
    /// each file moved out of the system's temporary location before the delegate method returns.)
    ///
    /// - Parameters:
    ///   - configuration: the session's configuration; its cookie storage and URL cache are turned off, and its
    ///     request timeout raised to a day (the engine's stall timeout is the limit).
    ///   - maximumConnectionsPerHost: the session's own cap on connections to one host. URLSession allows 6 unless
    ///     told otherwise, which would quietly cap a queue wider than that; the queue's limits decide how many
    ///     downloads run, and a queue raises it to its width (``allowConnections(perHost:)``).
    public init(configuration: URLSessionConfiguration = .ephemeral, maximumConnectionsPerHost: Int = 64) {
        let delegate = StreamingDelegate()
        backgroundIdentifier = configuration.identifier
        configuration.httpMaximumConnectionsPerHost = max(maximumConnectionsPerHost, 1)
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.timeoutIntervalForRequest = max(configuration.timeoutIntervalForRequest, Self.idleTimeout)
        current = Locked((Self.session(configuration, delegate: delegate), delegate, configuration))
    }

    /// How long URLSession lets a request go without a byte (its request timeout, in seconds): longer than any stall
    /// timeout, as the engine's watchdog decides when a transfer has stalled.
    static let idleTimeout: TimeInterval = 24 * 3600

    /// The `URLRequest` sent for `request`: the engine's header fields (cookies joined as one field), no encoding, and
    /// URLSession's own idle timeout kept out of the engine's way.
    static func urlRequest(_ request: HTTPRequest, url: URL, options: TransportOptions) -> URLRequest {
        var urlRequest = URLRequest(url: url)
        urlRequest.httpMethod = request.method.rawValue
        // Cookies are the engine's: URLSession would add its own and join them with commas.
        urlRequest.httpShouldHandleCookies = false
        request.headerFields.forEachJoiningCookies { field in
            urlRequest.addValue(field.value, forHTTPHeaderField: field.name.rawName)
        }
        urlRequest.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        // URLSession has no connect timeout of its own on Linux; its request timeout is an idle timeout, which is
        // the engine's stall watchdog's job (with the stall timeout of each download, however long): URLSession's own
        // stays out of its way.
        urlRequest.timeoutInterval = max(options.connectTimeout.secondsValue, Self.idleTimeout)
        return urlRequest
    }

    /// A session on `configuration` whose calls go to `delegate`, one at a time.
    private static func session(_ configuration: URLSessionConfiguration, delegate: StreamingDelegate) -> URLSession {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
    }

    deinit {
        current.withLock { $0.session }.invalidateAndCancel()
    }

    /// Raises the session's limit of connections to one host to at least `count` (a queue's width grew): new requests
    /// go to a new session with a new delegate (task identifiers are a session's own), at least twice the old limit so
    /// that few are made; the old session finishes the tasks it has, then is invalidated.
    public func allowConnections(perHost count: Int) {
        let replaced = current.withLock { current -> URLSession? in
            guard count > current.configuration.httpMaximumConnectionsPerHost,
                let configuration = current.configuration.copy() as? URLSessionConfiguration
            else { return nil }
            configuration.httpMaximumConnectionsPerHost = max(
                count, 2 * current.configuration.httpMaximumConnectionsPerHost)
            let old = current.session
            let delegate = StreamingDelegate()
            current = (Self.session(configuration, delegate: delegate), delegate, configuration)
            return old
        }
        replaced?.finishTasksAndInvalidate()
    }

    /// The limit of connections to one host of the session new requests go to.
    package var connectionsPerHost: Int { current.withLock { $0.configuration.httpMaximumConnectionsPerHost } }

    /// The session's request timeout in seconds: how long URLSession itself lets a request go without a byte.
    var sessionIdleTimeout: TimeInterval { current.withLock { $0.configuration.timeoutIntervalForRequest } }

    /// Sends `request` and returns at the response head.
    ///
    /// URLSession verifies `https` against the system's trust store and negotiates the HTTP version itself: a
    /// request whose `options` ask for other TLS settings or for HTTP/1.1 only fails with a permanent error that
    /// says so (use `NIOTransport` or `AsyncHTTPClientTransport` for those). So does a request through a proxy:
    /// URLSession takes its proxy per session (`URLSessionConfiguration.connectionProxyDictionary` on Apple
    /// platforms), not per request; configure it there and give the downloader no proxy.
    public func send(_ request: HTTPRequest, options: TransportOptions) async throws -> TransportResponse {
        guard let url = request.url else { throw URLError(.badURL) }
        if let refusal = Self.refusal(ofBackground: backgroundIdentifier) { throw refusal }
        if options.tls != .default || options.httpVersion == .http1_1 {
            throw TransportError(
                "URLSessionTransport cannot apply TLS settings (a CA, a client certificate, no verification) or pin "
                    + "HTTP/1.1; use the NIO or AsyncHTTPClient transport", isTransient: false)
        }
        if let proxy = options.proxy {
            throw TransportError(
                "URLSessionTransport cannot apply the proxy \(proxy) per request: set the session configuration's "
                    + "proxy and give the downloader none, or use the NIO or AsyncHTTPClient transport",
                isTransient: false)
        }
        let urlRequest = Self.urlRequest(request, url: url, options: options)
        // Made and started under the lock, so that a session being replaced is never given a task after it was told
        // to finish its tasks (``allowConnections(perHost:)``).
        let (task, stream) = current.withLock { current in
            let task = current.session.dataTask(with: urlRequest)
            let stream = current.delegate.register(task)
            task.resume()
            return (task, stream)
        }
        let head: HTTPResponse
        do {
            head = try await withTaskCancellationHandler {
                try await stream.head()
            } onCancel: {
                task.cancel()
            }
        } catch {
            await stream.close()
            throw error
        }
        // Only a 2xx body is stored: a redirect's or an error's goes to the engine as it is, decoded or not. A server
        // that encodes unasked does so again on every attempt.
        if (200..<300).contains(head.status.code), let encoding = head.headerFields[.contentEncoding],
            encoding.lowercased() != "identity"
        {
            await stream.close()
            throw TransportError(
                "the server sent Content-Encoding '\(encoding)' although identity was asked; URLSession would "
                    + "decode it, so the bytes could not be stored as sent", isTransient: false)
        }
        let body = ResponseBody {
            { () async throws -> (any ByteChunk)? in
                try await withTaskCancellationHandler {
                    try await stream.next()
                } onCancel: {
                    task.cancel()
                }
            }
        } close: {
            await stream.close()
        }
        return TransportResponse(head: head, body: body)
    }
}

extension Duration {
    var secondsValue: Double { seconds }
}

extension URLSessionTransport {
    /// The error every request on a background configuration fails with (its identifier; `nil` for another
    /// configuration): a background session does not run this transport's in-process delegate.
    static func refusal(ofBackground identifier: String?) -> TransportError? {
        identifier.map { identifier in
            TransportError(
                "URLSessionTransport cannot run on the background configuration '\(identifier)': it streams data tasks "
                    + "in this process, which a background session does not run; give it a default or ephemeral "
                    + "configuration", isTransient: false)
        }
    }

    /// A response's header fields from `allHeaderFields`, a dictionary in which Foundation joined repeated fields
    /// with ", ": fine for every field but `Set-Cookie`, whose cookies are split apart again (three `Set-Cookie`
    /// fields stay three cookies).
    static func fields(_ all: [AnyHashable: Any]) -> HTTPFields {
        var fields = HTTPFields()
        for (name, value) in all {
            guard let name = (name as? String).flatMap({ HTTPField.Name($0) }), let value = value as? String else {
                continue
            }
            if name == .setCookie {
                for cookie in SetCookieFolding.unfold(value) { fields.append(HTTPField(name: name, value: cookie)) }
            } else {
                fields.append(HTTPField(name: name, value: value))
            }
        }
        return fields
    }

    /// `error` as the engine classifies transport failures, as `NIOTransport`'s are: permanent where another attempt
    /// would meet it again (App Transport Security, a certificate refused either way, no such host, a URL it cannot
    /// load), transient otherwise (time-outs, lost and refused connections, no network). A `URLError` of another code
    /// is transient; anything else is kept as it is.
    static func readable(_ error: any Error, host: String) -> any Error {
        guard let urlError = error as? URLError, urlError.code != .cancelled else { return error }
        // FoundationNetworking (libcurl) reports a refused certificate as an unknown error with curl's words.
        let words = urlError.userInfo[NSLocalizedDescriptionKey] as? String ?? ""
        if urlError.code == .unknown, words.hasPrefix("SSL certificate problem") || words.hasPrefix("SSL: ") {
            return TransportError(
                "the certificate of \(host) was refused: \(words)", isTransient: false, underlying: urlError)
        }
        // libcurl's own words name what an unknown error was ("transfer closed with outstanding read data
        // remaining"): they say more than its code.
        if urlError.code == .unknown, !words.isEmpty {
            return TransportError("request to \(host) failed: \(words)", underlying: urlError)
        }
        let (message, isTransient) = describe(urlError.code, host: host)
        return TransportError(message, isTransient: isTransient, underlying: urlError)
    }

    /// The words and the classification of a `URLError` code.
    static func describe(_ code: URLError.Code, host: String) -> (message: String, isTransient: Bool) {
        switch code {
        case .appTransportSecurityRequiresSecureConnection:
            (
                "App Transport Security refuses plain http to \(host): use https, or allow it in the app's Info.plist "
                    + "(NSAppTransportSecurity)", false
            )
        case .serverCertificateUntrusted, .serverCertificateHasUnknownRoot:
            ("the certificate of \(host) is not trusted", false)
        case .serverCertificateHasBadDate:
            ("the certificate of \(host) has expired", false)
        case .serverCertificateNotYetValid:
            ("the certificate of \(host) is not valid yet", false)
        case .clientCertificateRequired:
            ("\(host) asks for a client certificate", false)
        case .clientCertificateRejected:
            ("\(host) refused the client certificate", false)
        case .secureConnectionFailed:
            ("the TLS handshake with \(host) failed", false)
        case .cannotFindHost:
            ("no such host: \(host)", false)
        case .unsupportedURL, .badURL:
            ("URLSession cannot load this URL (\(host))", false)
        case .userAuthenticationRequired, .userCancelledAuthentication:
            ("\(host) asks for credentials URLSession could not give", false)
        case .dataNotAllowed:
            (
                "the system does not allow this app to use the network here (cellular data off, or a restricted "
                    + "network)", false
            )
        case .timedOut:
            ("timed out waiting for \(host)", true)
        case .cannotConnectToHost:
            ("could not connect to \(host)", true)
        case .networkConnectionLost:
            ("the connection to \(host) was lost", true)
        case .notConnectedToInternet:
            ("not connected to the internet", true)
        case .dnsLookupFailed:
            ("the name of \(host) could not be looked up", true)
        default:
            ("request to \(host) failed: URLError \(code.rawValue)", true)
        }
    }
}

/// Routes URLSession's delegate calls to the stream of the task they are about.
private final class StreamingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // unchecked Sendable: `streams` is a Locked; NSObject has no state of its own here.
    private let streams = Locked([Int: TaskStream]())

    func register(_ task: URLSessionTask) -> TaskStream {
        let stream = TaskStream(task: task)
        streams.withLock { $0[task.taskIdentifier] = stream }
        return stream
    }

    private func stream(for task: URLSessionTask) -> TaskStream? {
        streams.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)  // the engine follows redirects, with its own rules
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        stream(for: dataTask)?.receive(response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        stream(for: dataTask)?.receive(data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let stream = streams.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        stream?.complete(error)
    }
}

/// The head and body chunks of one data task, handed from delegate callbacks to the engine's awaits. The
/// task is suspended while more than `highWater` bytes wait, and resumed below `lowWater`.
private final class TaskStream: Sendable {
    #if canImport(FoundationNetworking)
    // FoundationNetworking traps (NativeProtocol.swift) when a data task is suspended mid-transfer, and
    // delivers data to the delegate queue asynchronously, so nothing can push back: on Linux the buffer is
    // unbounded. One more reason AsyncHTTPClient is the Linux default.
    private static let highWater = Int.max
    #else
    private static let highWater = 4 << 20
    #endif
    private static let lowWater = 1 << 20

    private struct State {
        var head: Result<HTTPResponse, any Error>?
        var headWaiter: CheckedContinuation<HTTPResponse, any Error>?
        var chunks: [Data] = []
        var buffered = 0
        var suspended = false
        var end: Result<Void, any Error>?
        var chunkWaiter: CheckedContinuation<Data?, any Error>?
        /// Callers of ``close()`` waiting for the task to complete.
        var endWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Locked(State())
    private let task: URLSessionTask

    init(task: URLSessionTask) {
        self.task = task
    }

    func receive(_ response: URLResponse) {
        guard let http = response as? HTTPURLResponse else {
            complete(TransportError("not an HTTP response"))
            return
        }
        var head = HTTPResponse(status: .init(code: http.statusCode))
        head.headerFields = URLSessionTransport.fields(http.allHeaderFields)
        let waiter = state.withLock { state -> CheckedContinuation<HTTPResponse, any Error>? in
            state.head = .success(head)
            defer { state.headWaiter = nil }
            return state.headWaiter
        }
        waiter?.resume(returning: head)
    }

    func receive(_ data: Data) {
        let (waiter, suspend) = state.withLock { state -> (CheckedContinuation<Data?, any Error>?, Bool) in
            if let waiter = state.chunkWaiter {
                state.chunkWaiter = nil
                return (waiter, false)
            }
            state.chunks.append(data)
            state.buffered += data.count
            if state.buffered > Self.highWater && !state.suspended {
                state.suspended = true
                return (nil, true)
            }
            return (nil, false)
        }
        if suspend { task.suspend() }
        waiter?.resume(returning: data)
    }

    func complete(_ error: (any Error)?) {
        let error = error.map {
            URLSessionTransport.readable($0, host: task.originalRequest?.url?.host ?? "the server")
        }
        let (headWaiter, chunkWaiter, endWaiters) = state.withLock { state in
            let end: Result<Void, any Error> = error.map { .failure($0) } ?? .success(())
            state.end = end
            if state.head == nil { state.head = .failure(error ?? TransportError("no response")) }
            defer {
                state.headWaiter = nil
                state.chunkWaiter = nil
                state.endWaiters = []
            }
            return (state.headWaiter, state.chunkWaiter, state.endWaiters)
        }
        for waiter in endWaiters { waiter.resume() }
        headWaiter?.resume(throwing: error ?? TransportError("the connection closed without a response"))
        if let error {
            chunkWaiter?.resume(throwing: error)
        } else {
            chunkWaiter?.resume(returning: nil)
        }
    }

    /// Cancels the task unless it has completed, and returns once URLSession reports its completion: by then it
    /// has let go of the connection (closed, as a transfer cut short cannot be reused, or kept for the next one).
    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.end != nil { return true }
                state.endWaiters.append(continuation)
                return false
            }
            if done {
                continuation.resume()
            } else {
                task.cancel()
            }
        }
    }

    func head() async throws -> HTTPResponse {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state -> Result<HTTPResponse, any Error>? in
                if let head = state.head { return head }
                state.headWaiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    func next() async throws -> Data? {
        try await withCheckedThrowingContinuation { continuation in
            let (ready, resume) = state.withLock { state -> (Result<Data?, any Error>?, Bool) in
                if !state.chunks.isEmpty {
                    let chunk = state.chunks.removeFirst()
                    state.buffered -= chunk.count
                    let resume = state.suspended && state.buffered < Self.lowWater
                    if resume { state.suspended = false }
                    return (.success(chunk), resume)
                }
                switch state.end {
                case .success?: return (.success(nil), false)
                case .failure(let error)?: return (.failure(error), false)
                case nil:
                    state.chunkWaiter = continuation
                    let resume = state.suspended
                    state.suspended = false
                    return (nil, resume)
                }
            }
            if resume { task.resume() }
            if let ready { continuation.resume(with: ready) }
        }
    }
}
