import Foundation
import Testing

@testable import Haul

/// The token bucket and the request pacer on an injected clock: every rule without waiting for it.
@Suite("Throttle rules")
struct ThrottleTests {
    let start = ContinuousClock.now

    @Test(
        "progress is told at most once an interval, the first bytes at once, and what was not told yet before a long wait"
    )
    func progressBeforeWaiting() {
        var meter = ProgressMeter(interval: .milliseconds(100), now: start)
        func record(atMilliseconds ms: Int) -> Bool { meter.record(1000, now: start + .milliseconds(ms)) }
        func ask(atMilliseconds ms: Int) -> Bool { meter.reportBeforeWaiting(now: start + .milliseconds(ms)) }
        // Nothing recorded: nothing to tell before a wait.
        #expect(ask(atMilliseconds: 0) == false)
        #expect(record(atMilliseconds: 50) == false)
        #expect(record(atMilliseconds: 100) == true)
        // Told at 100 ms: a chunk 10 ms later is not due, and would go unseen for the whole wait without the ask.
        #expect(record(atMilliseconds: 110) == false)
        #expect(ask(atMilliseconds: 110) == true)
        #expect(ask(atMilliseconds: 111) == false)
        // The ask counts as an event: the next is due an interval after it.
        #expect(record(atMilliseconds: 200) == false)
        #expect(record(atMilliseconds: 210) == true)
        #expect(ask(atMilliseconds: 210) == false)
        // The first bytes of a body are told at once, whenever the last event was.
        let first = meter.record(1, now: start + .milliseconds(211), first: true)
        #expect(first)
    }

    @Test("a token bucket holds its takers to the rate, however they take, together")
    func bucketRate() {
        let bucket = TokenBucket(bytesPerSecond: 1000, now: start)
        // Empty at first: 500 bytes must wait half a second; the next taker waits behind the first.
        #expect(bucket.take(500, now: start) == .milliseconds(500))
        #expect(bucket.take(500, now: start) == .seconds(1))
        // A second later the debt is paid, nothing more.
        #expect(bucket.take(0, now: start + .seconds(1)) == .zero)
        // After a long pause it holds a twentieth of a second only: a short burst, then the rate.
        #expect(bucket.take(50, now: start + .seconds(60)) == .zero)
        #expect(bucket.take(100, now: start + .seconds(60)) == .milliseconds(100))
        // Over a long run of chunks, time taken = bytes / rate.
        var now = start + .seconds(100)
        var total = Duration.zero
        for _ in 0..<1000 {
            let wait = bucket.take(64, now: now)
            now += wait
            total += wait
        }
        #expect(abs(total.seconds - 64.0) < 0.2, "\(total)")
    }

    @Test("a bucket's rate changes while it is taken from: set, lowered, lifted; a debt is kept across a change")
    func bucketRateChanges() {
        let bucket = TokenBucket(bytesPerSecond: nil, now: start)
        #expect(!bucket.isLimited && bucket.bytesPerSecond == nil)
        #expect(bucket.take(1_000_000, now: start) == .zero)  // no limit: nothing to wait for, no debt
        let unlimited = bucket.version
        bucket.setRate(1000, now: start)
        #expect(bucket.isLimited && bucket.bytesPerSecond == 1000 && bucket.version == unlimited + 1)
        #expect(bucket.take(1000, now: start) == .seconds(1))
        // Lowered with 1000 bytes owed: they are paid at the new rate.
        bucket.setRate(100, now: start)
        #expect(bucket.remainingDelay(now: start) == .seconds(10))
        #expect(bucket.remainingDelay(now: start + .seconds(4)) == .seconds(6))
        // Lifted: the debt goes, and nothing waits any more.
        bucket.setRate(nil, now: start + .seconds(5))
        #expect(!bucket.isLimited && bucket.remainingDelay(now: start + .seconds(5)) == .zero)
        #expect(bucket.take(10_000, now: start + .seconds(5)) == .zero)
        // Set again: it starts empty at the new rate.
        bucket.setRate(2000, now: start + .seconds(6))
        #expect(bucket.take(1000, now: start + .seconds(6)) == .milliseconds(500))
    }

    @Test("requests are spaced by the run's rate, a host's rate and the wait between a host's requests")
    func pacerSpacing() throws {
        let pacer = RequestPacer(
            pacing: RequestPacing(rate: RequestRate(count: 4, per: .seconds(1))), random: { 0.5 })
        #expect(pacer.claim(host: "a", now: start) == nil)
        // A request that must wait claims nothing: asking again at once gets the same answer.
        #expect(pacer.claim(host: "a", now: start)?.delay == .milliseconds(250))
        #expect(pacer.claim(host: "b", now: start + .milliseconds(100))?.delay == .milliseconds(150))
        #expect(pacer.claim(host: "b", now: start)?.reason == .requestRate)
        // The next turn is spaced from when the request really started: one that woke late pushes the next along.
        #expect(pacer.claim(host: "a", now: start + .milliseconds(400)) == nil)
        #expect(pacer.claim(host: "a", now: start + .milliseconds(500))?.delay == .milliseconds(150))

        let perHost = RequestPacer(
            pacing: RequestPacing(perHostRate: RequestRate(count: 2, per: .seconds(1)), perHostWait: .seconds(2)),
            random: { 0.5 })
        #expect(perHost.claim(host: "a", now: start) == nil)
        let second = try #require(perHost.claim(host: "a", now: start))
        #expect(second.delay == .seconds(2) && second.reason == .hostWait)
        #expect(perHost.claim(host: "b", now: start) == nil)  // another host is not held back
        #expect(perHost.claim(host: "a", now: start + .seconds(10)) == nil)
    }

    @Test("a random wait lies between half and one and a half times the wait")
    func randomWait() throws {
        for (random, expected) in [(0.0, 500), (1.0, 1500), (0.5, 1000)] {
            let pacer = RequestPacer(
                pacing: RequestPacing(perHostWait: .seconds(1), randomizesWait: true), random: { random })
            _ = pacer.claim(host: "a", now: start)
            #expect(try #require(pacer.claim(host: "a", now: start)).delay == .milliseconds(expected))
        }
    }

    @Test("a host that asked for time holds every request to it, and no other")
    func hold() throws {
        let pacer = RequestPacer(pacing: RequestPacing(), random: { 0.5 })
        #expect(pacer.claim(host: "a", now: start) == nil)
        pacer.hold(host: "a", for: .seconds(3), now: start)
        let held = try #require(pacer.claim(host: "a", now: start + .seconds(1)))
        #expect(held.delay == .seconds(2) && held.reason == .retryAfter)
        #expect(pacer.claim(host: "b", now: start + .seconds(1)) == nil)
        #expect(pacer.claim(host: "a", now: start + .seconds(3)) == nil)
    }

    @Test("rates parse as curl's --rate reads them")
    func rateParsing() {
        #expect(RequestRate(parsing: "10/s") == RequestRate(count: 10, per: .seconds(1)))
        #expect(RequestRate(parsing: "30/m")?.interval == .seconds(2))
        #expect(RequestRate(parsing: "3600/hour")?.interval == .seconds(1))
        #expect(RequestRate(parsing: "5") == RequestRate(count: 5, per: .seconds(1)))
        for bad in ["", "0/s", "-1/s", "x/s", "10/week", "10/"] { #expect(RequestRate(parsing: bad) == nil, "\(bad)") }
        #expect(RequestRate(count: 2, per: .seconds(60)).description == "2/m")
    }

    @Test("HTTP dates: IMF-fixdate read by hand, the obsolete forms through the formatter, anything else refused")
    func httpDates() {
        for (text, seconds) in [
            ("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777), ("Tue, 14 Nov 2023 22:13:20 GMT", 1_700_000_000),
            ("Thu, 29 Feb 2024 00:00:00 GMT", 1_709_164_800), ("Thu, 01 Jan 1970 00:00:00 GMT", 0),
            ("Fri, 31 Dec 1999 23:59:59 GMT", 946_684_799),
        ] {
            #expect(HTTPRules.imfFixdate(text) == Int64(seconds), "\(text)")
            #expect(HTTPRules.httpDate(text)?.timeIntervalSince1970 == Double(seconds), "\(text)")
        }
        #expect(HTTPRules.httpDate("Sunday, 06-Nov-94 08:49:37 GMT")?.timeIntervalSince1970 == 784_111_777)
        #expect(HTTPRules.httpDate("Sun Nov  6 08:49:37 1994")?.timeIntervalSince1970 == 784_111_777)
        for bad in [
            "", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Xyz 1994 08:49:37 GMT", "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:4x:37 GMT",
        ] {
            #expect(HTTPRules.imfFixdate(bad) == nil, "\(bad)")
        }
    }
}
