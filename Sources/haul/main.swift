import HaulCommandLine

// The commands live in HaulCommandLine, so that tests parse them in process; this is only the entry point.
await HaulCommand.main()
