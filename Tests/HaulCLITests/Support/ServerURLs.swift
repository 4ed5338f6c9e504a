import Foundation
import HaulTestServer

/// `/bytes/NAME?size=SIZE` (with more query items) on `server`, as `haul get` takes it on its command line or in a list.
func bytes(_ server: TestServer, _ name: String, size: Int, _ query: [String: String] = [:]) -> String {
    var query = query
    query["size"] = "\(size)"
    return server.url(path: "/bytes/\(name)", query: query).absoluteString
}
