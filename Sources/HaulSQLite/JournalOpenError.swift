import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a journal could not be opened, in words a person can act on.
public struct JournalOpenError: Error, CustomStringConvertible {
    /// What kind of trouble it is.
    public enum Reason: Sendable, Hashable {
        /// Another process holds the database's lock and kept it past the wait (10 s).
        case inUse
        /// The directory or the database cannot be created or written (permissions, a read-only or full disk).
        case notWritable
        /// The database is not readable as a journal (damaged, or not a journal at all).
        case unreadable
        /// The file is another program's SQLite database (``JournalOpenError/detail`` names some of its tables): it
        /// is left exactly as it is, neither switched to WAL nor given the journal's tables.
        case notAJournal
        /// The journal was migrated by a newer version of Haul (``JournalOpenError/detail`` names the migrations this
        /// version does not know): it is left as it is, for that version.
        case newerVersion
        /// Beside the database lies a log of changes that an older version of Haul wrote and this one does not read
        /// (``JournalOpenError/detail`` names it): that version folds it into the database when it opens the journal.
        case olderLog
    }

    /// What kind of trouble it is.
    public let reason: Reason
    /// The journal's path.
    public let path: String
    /// What the system or SQLite said.
    public let detail: String

    /// What happened and what to do. Deleting the journal is advised only for one that is unreadable, never for one
    /// that another process is using.
    public var description: String {
        switch reason {
        case .inUse:
            "'\(path)' is in use by another process (still locked after 10 s); try again when it ends"
        case .notWritable:
            "cannot write '\(path)': \(detail) (check the directory's permissions and free space)"
        case .unreadable:
            "cannot read '\(path)': \(detail) (if it is damaged, delete it to start over: only resuming is lost)"
        case .notAJournal:
            "'\(path)' is another program's SQLite database (tables \(detail)), not a Haul journal: left as it is; "
                + "give the journal a path of its own"
        case .newerVersion:
            "'\(path)' was written by a newer version of Haul (its changes \(detail) are unknown to this one): left "
                + "as it is; use that version, or give this one a journal of its own"
        case .olderLog:
            "'\(path)' has changes that an older version of Haul left in '\(detail)', which this version does not "
                + "read: run that version once on the same directory to fold them in, or delete the log to go on "
                + "(only resuming and skipping those downloads is lost)"
        }
    }

    /// Runs `body`, turning what it throws into a ``JournalOpenError`` for the journal at `path`.
    static func mapping<Result>(_ path: String, _ body: () throws -> Result) throws(JournalOpenError) -> Result {
        do {
            return try body()
        } catch let error as JournalOpenError {
            throw error
        } catch let error as DatabaseError {
            let detail = error.message ?? "\(error.resultCode)"
            switch error.resultCode {
            case .SQLITE_BUSY, .SQLITE_LOCKED: throw JournalOpenError(reason: .inUse, path: path, detail: detail)
            case .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_CANTOPEN, .SQLITE_IOERR, .SQLITE_FULL, .SQLITE_AUTH:
                throw JournalOpenError(reason: .notWritable, path: path, detail: detail)
            default: throw JournalOpenError(reason: .unreadable, path: path, detail: detail)
            }
        } catch {
            throw JournalOpenError(reason: .notWritable, path: path, detail: posixReason(error))
        }
    }

    /// The system's words for a file error ("Permission denied"), else its description.
    private static func posixReason(_ error: any Error) -> String {
        let nsError = error as NSError
        let posix =
            nsError.domain == NSPOSIXErrorDomain
            ? nsError
            : (nsError.userInfo[NSUnderlyingErrorKey] as? NSError).flatMap {
                $0.domain == NSPOSIXErrorDomain ? $0 : nil
            }
        if let posix { return String(cString: strerror(Int32(posix.code))) }
        if nsError.domain == NSCocoaErrorDomain, nsError.code == CocoaError.fileWriteNoPermission.rawValue {
            return String(cString: strerror(EACCES))
        }
        return nsError.localizedDescription
    }
}
