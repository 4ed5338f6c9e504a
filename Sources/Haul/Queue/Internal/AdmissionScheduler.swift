import DequeModule
import HeapModule

/// Decides which waiting download starts next: a global limit, a per-host limit, priorities (higher first)
/// and FIFO within one priority. A value type with no I/O, so every rule is unit-tested on its own.
///
/// Admission costs O(1) amortised in the number of waiting downloads (O(log H) in the number of hosts that
/// have work waiting): each host keeps a FIFO per priority level, and a heap holds one entry per host that
/// could start something, keyed by that host's best waiting item. Nothing ever scans the waiting list.
/// Removals and priority changes are lazy: the stale position is skipped when it reaches the front.
///
/// A paused item keeps its place in the waiting order (its priority and sequence) but is out of its host's FIFO, so
/// admission never meets it; resuming puts it back where it was. Moving an item within the waiting order
/// (``reposition(_:to:)``, rare: a user's action) renumbers the items of its priority, in O(n).
///
/// Hosts are numbered when first seen (a number is reused once its host is forgotten): admitting or finishing a
/// download looks its host up several times, by number rather than by hashing its name (bench-queue). A reused number cannot confuse a stale heap entry: sequences are never reused, and an entry counts only
/// while its host's best item has its sequence.
package struct AdmissionScheduler {
    package typealias ID = UInt64

    /// The most downloads running at once (>= 1).
    package var maxConcurrent: Int {
        didSet { maxConcurrent = max(1, maxConcurrent) }
    }
    /// The most downloads running at once against one host; `nil` for no limit beyond ``maxConcurrent``.
    package var perHostLimit: Int? {
        didSet {
            if let limit = perHostLimit { perHostLimit = max(1, limit) }
            // Hosts that were full may have a free slot now; they are not in the heap, so offer them again.
            // Rare (a setting changed), so a pass over the hosts with work is fine here.
            for host in hosts.indices where hosts[host] != nil { offer(host) }
        }
    }
    /// While paused no download is admitted; running downloads go on, and so are the items ahead of the downloads
    /// admitted (``enqueue(_:host:priority:ahead:)``): each belongs to a download that is running.
    package var isPaused = false
    /// Limits of single hosts, by name, in place of ``perHostLimit``: 0 holds a host's items back (a paused host).
    package private(set) var hostLimits: [String: Int] = [:]

    /// A host's number: its index in ``hosts``.
    typealias HostNumber = Int

    private struct Waiting {
        var host: HostNumber
        var priority: Int
        var sequence: UInt64
    }

    private struct Slot {
        var id: ID
        var sequence: UInt64
    }

    /// A host's waiting items, changed in place (`hosts[host]?.…`), never copied out and written back: a copy
    /// would share the FIFO's buffer, and the next change would duplicate the whole FIFO. Its counters are kept
    /// apart (``HostCounters``): reading a field through `hosts[host]?.…` copied the whole host (its FIFOs
    /// retained and released) on every call.
    private struct Host {
        /// FIFO of waiting items per priority; may hold stale slots (removed or re-prioritised items).
        var levels: [Int: Deque<Slot>] = [:]
        /// The priorities that have a FIFO, highest first. Few distinct priorities are in use at once.
        var priorities: [Int] = []

        /// The best item of `waiting` in this host's FIFOs, dropping stale slots and empty levels on the way.
        // Called on the host in place (`hosts[host]?.head(in:)`), for the reason above.
        mutating func head(in waiting: [ID: Waiting]) -> (priority: Int, slot: Slot)? {
            while let priority = priorities.first {
                while let slot = levels[priority]?.first {
                    if let item = waiting[slot.id], item.priority == priority, item.sequence == slot.sequence {
                        return (priority, slot)
                    }
                    levels[priority]?.removeFirst()
                }
                levels[priority] = nil
                priorities.removeFirst()
            }
            return nil
        }

        /// Puts `slot` (an extra connection's, see ``AdmissionScheduler/enqueue(_:host:priority:ahead:)``) after the
        /// other extra connections at the front of its priority level, before every waiting download.
        mutating func insertAhead(_ slot: Slot, priority: Int) {
            guard let level = levels[priority] else { return append(slot, priority: priority) }
            let index = level.firstIndex { $0.sequence >= AdmissionScheduler.frontFloor } ?? level.endIndex
            levels[priority]?.insert(slot, at: index)
        }

        /// Puts `slot` back in its priority level where its sequence belongs (the FIFO is in sequence order).
        mutating func insertInOrder(_ slot: Slot, priority: Int) {
            guard let level = levels[priority] else { return append(slot, priority: priority) }
            let index = level.firstIndex { $0.sequence > slot.sequence } ?? level.endIndex
            levels[priority]?.insert(slot, at: index)
        }

        mutating func append(_ slot: Slot, priority: Int) {
            if levels[priority] == nil {
                levels[priority] = Deque()
                // A new priority level is rare and the list is short.
                priorities.insert(priority, at: priorities.firstIndex { $0 < priority } ?? priorities.endIndex)
            }
            levels[priority]?.append(slot)
        }
    }

    private struct HostCounters {
        var running = 0
        /// The key of this host's newest entry in the heap, so an unchanged best item is not pushed again
        /// (otherwise every enqueue on an idle host would add a heap entry, and the heap would grow with the
        /// waiting list).
        var offered: (priority: Int, sequence: UInt64)?
    }

    /// A host that may start something, keyed by its best waiting item at the time it was pushed.
    private struct Candidate: Comparable {
        var priority: Int
        var sequence: UInt64
        var host: HostNumber

        // Heap is a min-max heap; `max` is the next to admit: higher priority, then earlier submission.
        static func < (lhs: Candidate, rhs: Candidate) -> Bool {
            if lhs.priority != rhs.priority { return lhs.priority < rhs.priority }
            return lhs.sequence > rhs.sequence
        }
    }

    private var waiting: [ID: Waiting] = [:]
    /// Paused items, by the host name (not number: a host with only paused items is forgotten) and their place.
    private var paused: [ID: (host: String, priority: Int, sequence: UInt64)] = [:]
    private var running: [ID: HostNumber] = [:]
    /// The items waiting ahead of the downloads (few: extra connections and moves of running downloads), which a
    /// pause does not hold back. May name items gone since (admitted or removed), skipped and dropped when met.
    private var aheadWaiting: Set<ID> = []
    /// Hosts by number; `nil` where a forgotten host's number waits in ``freeNumbers`` to be reused.
    private var hosts: [Host?] = []
    private var counters: [HostCounters] = []
    private var names: [String] = []
    private var numbers: [String: HostNumber] = [:]
    private var freeNumbers: [HostNumber] = []
    private var candidates = Heap<Candidate>()
    /// Downloads are numbered from here up, extra connections from 1 up: an extra connection comes before every
    /// download of its priority, since it finishes a file that is already running.
    static let firstDownloadSequence: UInt64 = 1 << 62
    /// A download paused while it ran goes back to the front of the waiting order, counting down from
    /// ``firstDownloadSequence``; extra connections count up from 0 and stay below ``frontFloor``.
    static let frontFloor: UInt64 = 1 << 61
    private var nextSequence: UInt64 = firstDownloadSequence
    private var nextAheadSequence: UInt64 = 0
    private var nextFrontSequence: UInt64 = firstDownloadSequence

    package init(maxConcurrent: Int, perHostLimit: Int? = nil) {
        self.maxConcurrent = max(1, maxConcurrent)
        self.perHostLimit = perHostLimit.map { max(1, $0) }
    }

    /// Downloads waiting for a slot, paused ones included.
    package var waitingCount: Int { waiting.count + paused.count }
    /// The length of ``waitingOrder()``: ``waitingCount`` without the extra connections and moved downloads waiting
    /// ahead of the downloads (counted, not kept: one pass over those waiting).
    package var waitingOrderCount: Int {
        waiting.values.count { $0.sequence >= Self.frontFloor } + paused.count
    }
    /// Paused downloads.
    package var pausedCount: Int { paused.count }
    /// Downloads admitted and not yet finished.
    package var runningCount: Int { running.count }
    /// Their IDs (the queue sums their progress).
    var runningIDs: Dictionary<ID, HostNumber>.Keys { running.keys }
    /// Entries in the host heap, stale ones included: stays near the number of hosts with work (tests pin it).
    var candidateCount: Int { candidates.count }
    /// Hosts with something waiting or running (the others are forgotten).
    var hostCount: Int { numbers.count }

    /// Adds a waiting item. `host` is the key per-host limits count by. An item `ahead` (one more connection of a
    /// running download, fetching a segment of its file) waits before every download of its priority, after the
    /// other such items: it counts against the limits like a download, but finishes a file already begun.
    package mutating func enqueue(_ id: ID, host: String, priority: Int, ahead: Bool = false) {
        precondition(waiting[id] == nil && running[id] == nil, "download \(id) is already scheduled")
        let sequence: UInt64
        if ahead {
            nextAheadSequence += 1
            sequence = nextAheadSequence
        } else {
            nextSequence += 1
            sequence = nextSequence
        }
        let number = number(of: host)
        waiting[id] = Waiting(host: number, priority: priority, sequence: sequence)
        if ahead {
            hosts[number]?.insertAhead(Slot(id: id, sequence: sequence), priority: priority)
            aheadWaiting.insert(id)
        } else {
            append(Slot(id: id, sequence: sequence), to: number, priority: priority)
        }
        offer(number)
    }

    /// Removes a waiting or paused item (cancelled before it started). Returns `false` if it was neither.
    @discardableResult
    package mutating func remove(_ id: ID) -> Bool {
        if paused.removeValue(forKey: id) != nil { return true }
        guard let item = waiting.removeValue(forKey: id) else { return false }
        if item.sequence < Self.frontFloor { aheadWaiting.remove(id) }
        dropHostIfIdle(item.host)
        // If it was the host's best, the heap's entry for the host is stale now: the next one is offered.
        if hosts[item.host] != nil { offer(item.host) }
        return true
    }

    /// Changes a waiting item's priority; it goes to the back of its new priority level.
    /// Returns `false` if it was not waiting (already running or gone).
    @discardableResult
    package mutating func setPriority(_ priority: Int, of id: ID) -> Bool {
        if var item = paused[id] {
            guard item.priority != priority else { return true }
            nextSequence += 1
            item.priority = priority
            item.sequence = nextSequence
            paused[id] = item
            return true
        }
        guard var item = waiting[id] else { return false }
        guard item.priority != priority else { return true }
        nextSequence += 1
        item.priority = priority
        item.sequence = nextSequence
        waiting[id] = item
        append(Slot(id: id, sequence: item.sequence), to: item.host, priority: priority)
        offer(item.host)
        return true
    }

    // MARK: - Pausing and the waiting order

    /// Whether `id` is paused.
    package func isPaused(_ id: ID) -> Bool { paused[id] != nil }

    /// Whether `id` is waiting or paused.
    package func isWaiting(_ id: ID) -> Bool { waiting[id] != nil || paused[id] != nil }

    /// Pauses a waiting item: it keeps its place in the waiting order and is not admitted until ``unpause(_:)``.
    /// Returns `false` if it was not waiting (a paused one stays paused: `true`).
    @discardableResult
    package mutating func pause(_ id: ID) -> Bool {
        if paused[id] != nil { return true }
        guard let item = waiting.removeValue(forKey: id) else { return false }
        paused[id] = (names[item.host], item.priority, item.sequence)
        dropHostIfIdle(item.host)
        if hosts[item.host] != nil { offer(item.host) }
        return true
    }

    /// Adds an item at the front of the waiting order of its priority (a running download paused, whose slot was
    /// given back with ``finish(_:)``), paused or waiting.
    package mutating func enqueueAtFront(_ id: ID, host: String, priority: Int, paused isPaused: Bool) {
        precondition(
            waiting[id] == nil && running[id] == nil && paused[id] == nil, "download \(id) is already scheduled")
        nextFrontSequence -= 1
        let sequence = nextFrontSequence
        if isPaused {
            paused[id] = (host, priority, sequence)
        } else {
            let number = number(of: host)
            waiting[id] = Waiting(host: number, priority: priority, sequence: sequence)
            hosts[number]?.insertInOrder(Slot(id: id, sequence: sequence), priority: priority)
            offer(number)
        }
    }

    /// Lets a paused item be admitted again, from its place in the waiting order. Returns `false` if it was not
    /// paused.
    @discardableResult
    package mutating func unpause(_ id: ID) -> Bool {
        guard let item = paused.removeValue(forKey: id) else { return false }
        let number = number(of: item.host)
        waiting[id] = Waiting(host: number, priority: item.priority, sequence: item.sequence)
        hosts[number]?.insertInOrder(Slot(id: id, sequence: item.sequence), priority: item.priority)
        offer(number)
        return true
    }

    /// The waiting and paused items in the order they would be admitted without limits: higher priority first, then
    /// by their place. Extra connections are left out.
    package func waitingOrder() -> [ID] {
        var items: [(id: ID, priority: Int, sequence: UInt64)] = []
        items.reserveCapacity(waiting.count + paused.count)
        for (id, item) in waiting where item.sequence >= Self.frontFloor {
            items.append((id, item.priority, item.sequence))
        }
        for (id, item) in paused { items.append((id, item.priority, item.sequence)) }
        items.sort { $0.priority != $1.priority ? $0.priority > $1.priority : $0.sequence < $1.sequence }
        return items.map(\.id)
    }

    /// The place of a waiting or paused item in ``waitingOrder()`` (0 first), counted without sorting.
    package func position(of id: ID) -> Int? {
        guard let (priority, sequence) = place(of: id) else { return nil }
        func before(_ otherPriority: Int, _ otherSequence: UInt64) -> Bool {
            otherPriority != priority ? otherPriority > priority : otherSequence < sequence
        }
        var count = 0
        for item in waiting.values where item.sequence >= Self.frontFloor && before(item.priority, item.sequence) {
            count += 1
        }
        for item in paused.values where before(item.priority, item.sequence) { count += 1 }
        return count
    }

    private func place(of id: ID) -> (priority: Int, sequence: UInt64)? {
        if let item = waiting[id], item.sequence >= Self.frontFloor { return (item.priority, item.sequence) }
        if let item = paused[id] { return (item.priority, item.sequence) }
        return nil
    }

    /// Moves a waiting or paused item to `position` in ``waitingOrder()``, within the items of its own priority (a
    /// position before them puts it first among them, one after them last). Returns its new position, or `nil` if it
    /// is neither waiting nor paused. O(n): every item of its priority is renumbered in the new order.
    package mutating func reposition(_ id: ID, to position: Int) -> Int? {
        guard let (priority, _) = place(of: id) else { return nil }
        let order = waitingOrder()
        // The items of this priority are one run in the order.
        guard let start = order.firstIndex(where: { place(of: $0)?.priority == priority }) else { return nil }
        var level = Array(order[start...].prefix { place(of: $0)?.priority == priority })
        level.removeAll { $0 == id }
        // Clamped before the subtraction: a position as far off as Int.min must not overflow.
        let index = min(max(position, start), start + level.count) - start
        level.insert(id, at: index)
        var touched = Set<HostNumber>()
        for member in level {
            nextSequence += 1
            if var item = waiting[member] {
                item.sequence = nextSequence
                waiting[member] = item
                touched.insert(item.host)
            } else if var item = paused[member] {
                item.sequence = nextSequence
                paused[member] = item
            }
        }
        // Each host's FIFO of this priority is rebuilt in the new order (dropping its stale slots), and offered
        // afresh: the heap's entries for it are stale now, and are skipped when they come up.
        for host in touched {
            let members = level.compactMap { member -> Slot? in
                guard let item = waiting[member], item.host == host else { return nil }
                return Slot(id: member, sequence: item.sequence)
            }
            let ahead = hosts[host]?.levels[priority]?.filter { $0.sequence < Self.frontFloor } ?? []
            hosts[host]?.levels[priority] = Deque(ahead + members)
            counters[host].offered = nil
            offer(host)
        }
        return start + index
    }

    /// Marks a running item finished, freeing its slots.
    package mutating func finish(_ id: ID) {
        guard let host = running.removeValue(forKey: id) else { return }
        counters[host].running -= 1
        offer(host)
        dropHostIfIdle(host)
    }

    /// Moves a running item to `host` (a download going on from another source) when that host has a free slot: it
    /// keeps its global slot, and the host it leaves may admit something. Returns `false`, changing nothing, when the
    /// host has no free slot (the caller then gives the slot back with ``finish(_:)`` and waits for one there).
    package mutating func move(_ id: ID, to host: String) -> Bool {
        guard let old = running[id] else { return false }
        let new = number(of: host)
        if new == old { return true }
        guard hasFreeSlot(new) else {
            dropHostIfIdle(new)
            return false
        }
        running[id] = new
        counters[old].running -= 1
        counters[new].running += 1
        offer(old)
        dropHostIfIdle(old)
        return true
    }

    /// The host a running item counts against, if it is running.
    package func host(of id: ID) -> String? {
        running[id].map { names[$0] }
    }

    /// Admits as many waiting items as the limits allow, in admission order.
    package mutating func admit() -> [ID] {
        if isPaused { return admitAhead() }
        var admitted: [ID] = []
        while running.count < maxConcurrent, let candidate = candidates.popMax() {
            if let offered = counters[candidate.host].offered, offered.priority == candidate.priority,
                offered.sequence == candidate.sequence
            {
                counters[candidate.host].offered = nil  // its newest entry has left the heap
            }
            guard hasFreeSlot(candidate.host), let head = head(of: candidate.host),
                head.priority == candidate.priority, head.slot.sequence == candidate.sequence
            else {
                // Stale: the host's current best, if it has one and a free slot, gets an entry of its own (offer()
                // pushes nothing when that entry is in the heap already).
                if hosts[candidate.host] != nil { offer(candidate.host) }
                continue
            }
            let id = head.slot.id
            hosts[candidate.host]?.levels[head.priority]?.removeFirst()
            waiting[id] = nil
            if head.slot.sequence < Self.frontFloor { aheadWaiting.remove(id) }
            running[id] = candidate.host
            counters[candidate.host].running += 1
            admitted.append(id)
            offer(candidate.host)
        }
        return admitted
    }

    /// Admits, while paused, the items waiting ahead of the downloads that the limits allow, in admission order:
    /// without them a running download waiting for a slot at its mirror's host would wait until the pause ends.
    /// Their slots stay in their hosts' FIFOs, stale (their item is no longer waiting), dropped when they reach the
    /// front; the heap's entries for those hosts are checked the same way when popped.
    private mutating func admitAhead() -> [ID] {
        guard !aheadWaiting.isEmpty else { return [] }
        var items: [(id: ID, item: Waiting)] = []
        for id in aheadWaiting {
            if let item = waiting[id], item.sequence < Self.frontFloor { items.append((id, item)) }
        }
        aheadWaiting = Set(items.map(\.id))
        items.sort {
            $0.item.priority != $1.item.priority
                ? $0.item.priority > $1.item.priority : $0.item.sequence < $1.item.sequence
        }
        var admitted: [ID] = []
        for (id, item) in items where running.count < maxConcurrent && hasFreeSlot(item.host) {
            waiting[id] = nil
            aheadWaiting.remove(id)
            running[id] = item.host
            counters[item.host].running += 1
            admitted.append(id)
            offer(item.host)
        }
        return admitted
    }

    // MARK: - Host bookkeeping

    /// The number of the host named `name`, numbering it if it is new.
    private mutating func number(of name: String) -> HostNumber {
        if let number = numbers[name] { return number }
        let number: HostNumber
        if let free = freeNumbers.popLast() {
            number = free
            hosts[number] = Host()
            counters[number] = HostCounters()
            names[number] = name
        } else {
            number = hosts.count
            hosts.append(Host())
            counters.append(HostCounters())
            names.append(name)
        }
        numbers[name] = number
        return number
    }

    private func hasFreeSlot(_ host: HostNumber) -> Bool {
        // Most queues have no limit of a single host: no lookup of the name then.
        let limit = hostLimits.isEmpty ? perHostLimit : hostLimits[names[host]] ?? perHostLimit
        return counters[host].running < (limit ?? Int.max)
    }

    /// Sets the limit of the host `name` in place of ``perHostLimit`` (0 holds its items back; at least 0), or
    /// returns it to ``perHostLimit`` (`nil`). Running items go on; a host below its new limit is offered again.
    package mutating func setLimit(_ limit: Int?, forHost name: String) {
        hostLimits[name] = limit.map { max(0, $0) }
        if let number = numbers[name], hosts[number] != nil { offer(number) }
    }

    /// One host's load: its items running and waiting (paused ones not counted), and its own limit if it has one.
    package struct HostLoad: Equatable, Sendable {
        package var host: String
        package var running: Int
        package var waiting: Int
        package var limit: Int?
    }

    /// The load of every host with items running or waiting, and of every host with a limit of its own, by name.
    /// O(n) in the items waiting: for a view, not for admission.
    package func hostLoads() -> [HostLoad] {
        var loads: [String: HostLoad] = [:]
        for (name, limit) in hostLimits {
            loads[name] = HostLoad(host: name, running: 0, waiting: 0, limit: limit)
        }
        for (number, name) in names.enumerated() where hosts[number] != nil {
            loads[name, default: HostLoad(host: name, running: 0, waiting: 0, limit: nil)].running =
                counters[number].running
        }
        for item in waiting.values where item.sequence >= Self.frontFloor {
            loads[names[item.host], default: HostLoad(host: names[item.host], running: 0, waiting: 0, limit: nil)]
                .waiting += 1
        }
        return loads.values.sorted { $0.host < $1.host }
    }

    /// Pushes `host`'s current best waiting item as a candidate, if it has one, a free slot, and is not in the
    /// heap already.
    private mutating func offer(_ host: HostNumber) {
        guard hasFreeSlot(host), let head = head(of: host) else { return }
        if let offered = counters[host].offered, offered.priority == head.priority,
            offered.sequence == head.slot.sequence
        {
            return
        }
        counters[host].offered = (head.priority, head.slot.sequence)
        candidates.insert(Candidate(priority: head.priority, sequence: head.slot.sequence, host: host))
    }

    /// The host's best live waiting item, dropping stale slots and empty levels on the way.
    private mutating func head(of host: HostNumber) -> (priority: Int, slot: Slot)? {
        hosts[host]?.head(in: waiting)
    }

    private mutating func append(_ slot: Slot, to host: HostNumber, priority: Int) {
        hosts[host]?.append(slot, priority: priority)
    }

    /// Forgets a host with nothing running and nothing waiting, so the map does not grow with every host seen.
    private mutating func dropHostIfIdle(_ host: HostNumber) {
        guard hosts[host] != nil, counters[host].running == 0, head(of: host) == nil else { return }
        numbers[names[host]] = nil
        hosts[host] = nil
        freeNumbers.append(host)
    }
}
