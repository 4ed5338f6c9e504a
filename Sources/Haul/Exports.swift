// `Haul` builds on `HaulOperations`: its operations, groups and failure policies are part of Haul's API
// (`DownloadOperation` is a `ResultOperation`, `DownloadQueue` takes a `FailurePolicy`), so `import Haul` is
// enough to use them.
@_exported public import HaulOperations
