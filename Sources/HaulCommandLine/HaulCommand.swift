public import ArgumentParser
import Foundation
import HaulBuildInfo

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `haul` command: download queues with controlled concurrency, and the tools around them.
///
/// The `haul` executable calls ``main()``; tests parse arguments with `HaulCommand.parseAsRoot(_:)`.
public struct HaulCommand: AsyncParsableCommand {
    /// Haul's version, as releases are numbered.
    public static let version = "0.1.0"

    /// The command's name, version and subcommands.
    public static let configuration = CommandConfiguration(
        commandName: "haul",
        abstract: "Run downloads through a queue with controlled concurrency.",
        // The commit too: a bug report quoting `haul --version` then names the exact sources.
        version: "haul \(version) (commit \(BuildInfo.commitDescription))",
        subcommands: [
            GetCommand.self, DemoCommand.self, ServeCommand.self, EnqueueCommand.self, WorkerCommand.self,
            StatusCommand.self, QueueCommand.self, DaemonCommand.self,
        ]
    )

    /// A command with nothing parsed yet (ArgumentParser fills it in).
    public init() {}

    /// Readies the process for the command `arguments` name; call it first, before the entry point's first `await`,
    /// while the main thread is the only one. `haul daemon` and `haul worker` limit the allocator's arenas to one
    /// per core (``ServiceMemory``): the limit holds only if set before another thread has taken an arena, and
    /// ``main()`` already runs on a thread of the concurrency pool, which may have started others.
    public static func prepareProcess(arguments: [String] = CommandLine.arguments) {
        let services = [DaemonCommand.configuration.commandName, WorkerCommand.configuration.commandName]
        if let name = arguments.dropFirst().first, services.contains(name) { ServiceMemory.limitArenas() }
    }

    /// Runs the command with `haul get`'s exit-status contract: 2 for every usage error (ArgumentParser's own
    /// would be 64), the command's status otherwise.
    public static func main() async {
        // The signal mask is inherited across exec: a parent may start us with SIGINT/SIGTERM blocked. Threads
        // inherit it too, so unblock before any is created, or Ctrl-C and SIGTERM would never arrive.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
        // Copied for the parser first; then other users' `ps` no longer shows the passwords they hold.
        let arguments = Array(CommandLine.arguments.dropFirst())
        ArgumentSecrets.hideInArgumentVector()
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let failure as UsageFailure {
            for problem in failure.problems { Console.err("haul: \(problem)\n") }
            Console.err("haul: \(failure.summary)\n")
            Foundation.exit(2)
        } catch let code as ExitCode {
            Foundation.exit(code.rawValue)
        } catch {
            let status = exitCode(for: error)
            let message = fullMessage(for: error)
            if status == .success {
                Console.out(message + "\n")
                Foundation.exit(0)
            }
            Console.err(message + "\n")
            Foundation.exit(status == .validationFailure ? 2 : status.rawValue)
        }
    }
}
