/// Why an operation of HaulOperations did not produce a value.
///
/// A struct wrapping a private code, so that cases can be added without breaking the API; compare with the
/// static members (`error.code == .cancelled`) or use the helpers (``isCancellation``, ``rootCause``).
public struct OperationError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: Hashable, Sendable {
            case cancelled, dependencyFailed, dependencyCancelled, missingResult
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// The operation was cancelled before it produced a value.
        public static let cancelled = Code(.cancelled)
        /// An operation this one consumes failed, so this one did not run.
        public static let dependencyFailed = Code(.dependencyFailed)
        /// An operation this one consumes was cancelled, so this one did not run.
        public static let dependencyCancelled = Code(.dependencyCancelled)
        /// The operation finished without setting a result (a bug in a ``ResultOperation`` subclass), or
        /// a consumer read a producer that has not finished (a missing dependency).
        public static let missingResult = Code(.missingResult)

        /// The code's name.
        public var description: String {
            switch value {
            case .cancelled: "cancelled"
            case .dependencyFailed: "dependencyFailed"
            case .dependencyCancelled: "dependencyCancelled"
            case .missingResult: "missingResult"
            }
        }
    }

    /// What kind of failure this is.
    public let code: Code
    /// The name of the operation the error is about (the dependency, for the dependency codes).
    public let operationName: String?
    /// The dependency's own error, for ``Code/dependencyFailed``.
    public let underlying: (any Error)?

    init(_ code: Code, operationName: String?, underlying: (any Error)? = nil) {
        self.code = code
        self.operationName = operationName
        self.underlying = underlying
    }

    /// `true` when the value is missing because something was cancelled (this operation or a producer).
    public var isCancellation: Bool {
        code == .cancelled || code == .dependencyCancelled
    }

    /// The first error that is not a dependency error: what actually went wrong up the chain.
    public var rootCause: any Error {
        var current: any Error = self
        while let error = current as? OperationError, error.code == .dependencyFailed, let next = error.underlying {
            current = next
        }
        return current
    }

    /// A sentence saying what happened and to which operation.
    public var description: String {
        let subject = operationName.map { "operation '\($0)'" } ?? "an unnamed operation"
        let dependency = operationName.map { "'\($0)'" } ?? "(unnamed)"
        switch code {
        case .cancelled:
            return "\(subject) was cancelled before it produced a value"
        case .dependencyFailed:
            let reason = underlying.map { String(describing: $0) } ?? "unknown error"
            return "dependency \(dependency) failed: \(reason)"
        case .dependencyCancelled:
            return "dependency \(dependency) was cancelled"
        default:
            return "\(subject) has no result: it finished without one, or it is read before it finished "
                + "(add it as a dependency of the operation that reads it)"
        }
    }
}

/// An error that says whether it reports a cancellation rather than a failure. ``OperationGroup`` does not count a
/// member that ends with one as failed, and a consumer of an operation that ended with one is told
/// ``OperationError/Code/dependencyCancelled``. ``OperationError`` conforms, as does Haul's `DownloadError`; Swift's
/// `CancellationError` counts as a cancellation too.
public protocol CancellationReporting: Error {
    /// `true` when the error reports a cancellation.
    var isCancellation: Bool { get }
}

extension OperationError: CancellationReporting {}

extension OperationError {
    /// Whether `error` reports a cancellation: a ``CancellationReporting`` error that says so, or `CancellationError`.
    static func reportsCancellation(_ error: any Error) -> Bool {
        (error as? any CancellationReporting)?.isCancellation == true || error is CancellationError
    }
}
