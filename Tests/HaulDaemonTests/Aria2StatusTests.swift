import Foundation
import Haul
@testable import HaulDaemon
import Testing

/// The status objects clients poll every second, written straight to bytes: valid JSON whatever the names hold,
/// aria2's members with every number a string, `keys` honoured, user info never shown.
@Suite("aria2 status objects (no I/O)")
struct Aria2StatusTests {
    static func item(directory: String, name: String, uris: [String]) throws -> Daemon.Item {
        let root = URL(fileURLWithPath: directory, isDirectory: true)
        return Daemon.Item(
            gid: try #require(GID(0x0123_4567_89ab_cdef)), uris: uris, options: [:],
            request: DownloadRequest(
                url: try #require(URL(string: uris[0])), destination: .file(root.appendingPathComponent(name))))
    }

    @Test("an ended download: every member, escaped names read back by Foundation, user info left out, mirrors waiting")
    func ended() throws {
        var item = try Self.item(
            directory: "/data/a \"quoted\" dir\\x", name: "new\nline\u{1}.bin",
            uris: ["http://user:pw@example.com/f", "http://mirror.example/f"])
        item.ending = Daemon.Ending(
            status: "error", length: 3_000_000, completed: Int64.max, errorCode: 22, errorMessage: "HTTP \"404\"")
        let text = Aria2Status.object(item, status: nil, keys: nil).encoded()
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text)) as? [String: Any])
        #expect(object["gid"] as? String == "0123456789abcdef" && object["status"] as? String == "error")
        #expect(object["totalLength"] as? String == "3000000")
        #expect(object["completedLength"] as? String == String(Int64.max))
        #expect(object["numPieces"] as? String == "3" && object["pieceLength"] as? String == "1048576")
        #expect(object["errorCode"] as? String == "22" && object["errorMessage"] as? String == "HTTP \"404\"")
        #expect(object["dir"] as? String == "/data/a \"quoted\" dir\\x")
        #expect(object["bitfield"] as? String == "e0")
        #expect(Set(object.keys).count == 15)
        let file = try #require((object["files"] as? [[String: Any]])?.first)
        #expect(file["path"] as? String == "/data/a \"quoted\" dir\\x/new\nline\u{1}.bin")
        let uris = try #require(file["uris"] as? [[String: String]])
        #expect(uris.map { $0["status"] } == ["used", "waiting"])
        #expect(!String(decoding: text, as: UTF8.self).contains("pw@") && uris[1]["uri"] == "http://mirror.example/f")
    }

    @Test("bitfield: one bit a MiB piece, the first the highest, loaded from the start, spare bits clear, in hex")
    func bitfield() {
        let piece = Aria2Status.pieceLength
        #expect(Aria2Status.bitfield(total: 1000, completed: 1000) == "80")
        #expect(Aria2Status.bitfield(total: 1000, completed: 999) == "00")
        #expect(Aria2Status.bitfield(total: 10 * piece + 1, completed: 0) == "0000")
        #expect(Aria2Status.bitfield(total: 10 * piece + 1, completed: 3 * piece + piece / 2) == "e000")
        #expect(Aria2Status.bitfield(total: 10 * piece + 1, completed: 8 * piece) == "ff00")
        #expect(Aria2Status.bitfield(total: 10 * piece + 1, completed: 10 * piece + 1) == "ffe0")
        #expect(Aria2Status.bitfield(total: 16 * piece, completed: 16 * piece) == "ffff")
    }

    @Test("keys choose the members; an unknown key is left out; a waiting download has no error members")
    func keys() throws {
        let item = try Self.item(directory: "/", name: "top.bin", uris: ["http://example.com/top.bin"])
        let chosen = Aria2Status.object(
            item, status: nil, keys: ["status", "files", "bittorrent", "errorCode", "bitfield"])
        let members = try #require(chosen.object)
        #expect(Set(members.keys) == ["status", "files"] && members["status"] == "waiting")
        #expect(members["files"]?.array?.first?.object?["path"] == "/top.bin")
        let list = Aria2Status.list([(item, nil), (item, nil)], keys: ["gid"])
        #expect(list == [["gid": "0123456789abcdef"], ["gid": "0123456789abcdef"]])
        #expect(Aria2Status.list([], keys: nil) == [])
    }

    @Test("an encoded value is the value it encodes: equal, hashed alike, read through the accessors")
    func encoded() throws {
        let tree: JSON = ["a": ["1", 2, true, .null], "b": "x"]
        let text = JSON.encoded(EncodedJSON(tree.encoded()))
        #expect(text == tree && tree == text && text.hashValue == tree.hashValue)
        #expect(text.object?["b"] == "x" && text.object?["a"]?.array?.count == 4)
        #expect(JSON.encoded(EncodedJSON(Array("[]".utf8))) != JSON.array([.null]))
    }
}
