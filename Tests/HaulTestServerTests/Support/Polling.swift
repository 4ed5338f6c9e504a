import HaulTestServer

/// Waits until `condition` holds, checking every millisecond; the suite's time limit bounds it.
/// This waits for a state the server reports, not for time to pass.
func waitUntil(_ condition: () -> Bool) async throws {
    while !condition() {
        try await Task.sleep(for: .milliseconds(1))
    }
}
