import ArgumentParser

/// The `haul` command: download queues with controlled concurrency, and the tools around them.
@main
struct HaulCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "haul",
        abstract: "Run downloads through a queue with controlled concurrency.",
        version: "0.1.0",
        subcommands: [ServeCommand.self]
    )
}
