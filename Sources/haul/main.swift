import HaulCommandLine

// The commands live in HaulCommandLine, so that tests parse them in process; this is only the entry point.
// Before the first await, on the main thread, the only one yet.
HaulCommand.prepareProcess()
await HaulCommand.main()
