package cases

import "github.com/slidelimit/slidelimit/internal/reference"

func rateBurst(rate, burst int64) map[string]int64 {
	return map[string]int64{"ratePerSec": rate, "burst": burst}
}

// bucketWalks are the random walks shared by the token bucket and GCRA files: the same seeds
// give the same calls, so the allow steps of the two files must agree (docs/policies.md: the two
// make the same decision on every request). Each file adds its own walk at its largest rate.
func bucketWalks(s *set) {
	s.walk("random-walk-rate-10-burst-5", rateBurst(10, 5), 131, walkSpec{keys: 2, start: T, maxDt: 80, jumpDt: 2000, maxCost: 3, steps: 80})
	s.walk("random-walk-rate-3-burst-2", rateBurst(3, 2), 132, walkSpec{keys: 2, start: T, maxDt: 400, jumpDt: 5000, maxCost: 2, steps: 80})
	s.walk("random-walk-rate-2500-burst-40", rateBurst(2500, 40), 133, walkSpec{keys: 2, start: T, maxDt: 2, jumpDt: 100, maxCost: 25, steps: 80})
	s.walk("random-walk-costs-above-burst", rateBurst(7, 3), 135, walkSpec{keys: 2, start: T, maxDt: 200, jumpDt: 3000, maxCost: 5, steps: 60})
	s.honourWalk("retryAfter-honoured-rate-10-burst-5", rateBurst(10, 5), 231, T, 400)
	s.honourWalk("retryAfter-honoured-rate-3-burst-4", rateBurst(3, 4), 232, T, 900)
}

// tokenBucket pins docs/policies.md "token bucket". Unless a case says otherwise: rate 10/s, burst
// 5, so fillMs = ceilDiv(5000, 10) = 500; credit is in thousandths of a token.
func tokenBucket(s *set) {
	const tok = reference.CallTokensOf
	p := rateBurst(10, 5)

	s.add("new-key-starts-full", p).
		allow(1, 5, T, true).allow(1, 1, T, false).probe(tok, 1, T, 0)
	s.add("tokensOf-unknown-key-is-burst-and-not-created", p).
		probe(tok, 1, T, 5).size(0)
	s.add("refills-one-token-per-100ms", p).
		allow(1, 5, T, true).
		probe(tok, 1, T+99, 0).  // credit 990
		probe(tok, 1, T+100, 1). // credit 1000: one token, credit 0
		probe(tok, 1, T+250, 2). // credit 1500: one more, credit 500
		probe(tok, 1, T+300, 3)  // credit 500 + 500
	s.add("credit-carries-fractions-rate-3", rateBurst(3, 2)).
		allow(1, 2, T, true).
		probe(tok, 1, T+333, 0). // credit 999
		probe(tok, 1, T+334, 1). // credit 1002: one token, credit 2
		allow(1, 1, T+334, true).
		retry(1, T+334, 333) // ceilDiv(1000-2, 3) = ceil(332.67)
	s.add("refill-saturates-at-burst-and-drops-credit", rateBurst(3, 2)).
		// fillMs = ceilDiv(2000, 3) = 667
		allow(1, 2, T, true).
		probe(tok, 1, T+700, 2). // dt min(700, 667): credit 2001, 2 tokens, credit 1: full, credit 0
		allow(1, 2, T+700, true).
		retry(1, T+700, 334) // ceilDiv(1000-0, 3); it would be 333 had credit 1 been kept
	s.add("retryAfter-is-ceilDiv-of-missing-credit", p).
		allow(1, 5, T, true).
		retry(1, T, 100).   // ceilDiv(1000, 10)
		retry(1, T+37, 63). // credit 370: ceilDiv(630, 10)
		allow(1, 1, T+99, false).
		allow(1, 1, T+100, true)
	s.add("retryAfter-unknown-key-is-0-and-not-created", p).
		retry(1, T, 0).size(0)
	s.add("retryAfter-0-with-a-token-left", p).
		allow(1, 4, T, true).retry(1, T, 0)
	s.add("cost-above-burst-refused-key-still-tracked", p).
		allow(1, 6, T, false).size(1).probe(tok, 1, T, 5)
	s.add("cost-2^62-refused-without-overflow", p).
		allow(1, Huge, T, false).size(1).probe(tok, 1, T, 5)
	s.add("cost-zero-admitted-creates-key", p).
		allow(1, 0, T, true).size(1).probe(tok, 1, T, 5)
	s.add("cost-zero-admitted-when-empty", p).
		allow(1, 5, T, true).allow(1, 0, T, true)
	s.add("tie-cost-equal-to-tokens-admits", p).
		allow(1, 3, T, true).allow(1, 2, T, true).allow(1, 1, T, false)
	s.add("refused-request-consumes-nothing", p).
		allow(1, 3, T, true).allow(1, 3, T, false).probe(tok, 1, T, 2).allow(1, 2, T, true)
	s.add("same-millisecond-adds-nothing", p).
		allow(1, 5, T, true).allow(1, 1, T, false).allow(1, 1, T, false).probe(tok, 1, T, 0)
	s.add("idle-time-does-not-bank-beyond-burst", p).
		allow(1, 5, T, true).allow(1, 5, T+60_000, true).allow(1, 1, T+60_000, false)
	s.add("rate-1-per-second", rateBurst(1, 1)).
		allow(1, 1, T, true).
		retry(1, T, 1000).
		allow(1, 1, T+999, false).
		allow(1, 1, T+1000, true)
	s.add("rate-2500-several-tokens-per-ms", rateBurst(2500, 10)).
		allow(1, 10, T, true).
		probe(tok, 1, T+1, 2). // credit 2500: 2 tokens, credit 500
		probe(tok, 1, T+2, 5). // credit 500 + 2500 = 3000: 3 more
		allow(1, 5, T+2, true).
		retry(1, T+2, 1) // ceilDiv(1000, 2500)
	s.add("rate-max-burst-max", rateBurst(MaxCount, MaxCount)).
		// fillMs = ceilDiv((2^32-1)*1000, 2^32-1) = 1000
		allow(1, MaxCount, T, true).
		probe(tok, 1, T+1, 4_294_967). // credit 4294967295: 4294967 tokens, credit 295
		retry(1, T+1, 0).
		// dt 999: credit 295 + 4294967295*999 = 4290672328000: +4290672328 = 2^32-1 exactly
		probe(tok, 1, T+1000, MaxCount)
	s.add("burst-max-rate-1", rateBurst(1, MaxCount)).
		allow(1, MaxCount, T, true).
		probe(tok, 1, T+5000, 5).
		retry(1, T+5000, 0).
		allow(1, 6, T+5000, false)
	s.add("tokensOf-rolls-forward", p).
		allow(1, 5, T, true).probe(tok, 1, T+200, 2).probe(tok, 1, T+400, 4).probe(tok, 1, T+900, 5)
	s.add("several-keys-are-independent", p).
		allow(1, 5, T, true).allow(2, 2, T, true).allow(1, 1, T, false).allow(2, 3, T, true).
		allow(3, 6, T, false).size(3).probe(tok, 3, T, 5)
	const t45 = 1 << 45
	s.add("time-2^45-ms", p).
		allow(1, 5, t45, true).retry(1, t45, 100).allow(1, 1, t45+99, false).allow(1, 1, t45+100, true)
	bucketWalks(s)
	s.walk("random-walk-rate-max-burst-max", rateBurst(MaxCount, MaxCount), 134, walkSpec{keys: 2, start: T, maxDt: 2, jumpDt: 2000, maxCost: MaxCount, steps: 60})
}

// gcra pins docs/policies.md "GCRA". Unless a case says otherwise: rate 10/s, burst 5. Scaled time:
// 1 ms = 10 units, one permit = 1000, tolerance = (5-1)*1000 = 4000; s = now*10.
func gcra(s *set) {
	const tok = reference.CallTokensOf
	p := rateBurst(10, 5)

	s.add("cost-above-burst-refused-before-lookup-creates-no-state", p).
		allow(1, 6, T, false).size(0).probe(tok, 1, T, 5).retry(1, T, 0)
	s.add("cost-2^62-refused-creates-no-state", p).
		allow(1, Huge, T, false).size(0)
	s.add("cost-above-burst-refused-on-existing-key", p).
		allow(1, 1, T, true). // tat = s + 1000
		allow(1, 6, T, false).size(1).
		probe(tok, 1, T, 4) // avail = s - (s + 1000 - 5000) = 4000
	s.add("new-key-admits-full-burst", p).
		allow(1, 5, T, true).  // s >= s - 4000 + 4000: tat = s + 5000
		allow(1, 1, T, false). // s < s + 5000 - 4000
		size(1)
	s.add("cost-zero-admitted-creates-key", p).
		allow(1, 0, T, true).size(1).
		probe(tok, 1, T, 5) // tat = s: avail = 5000
	s.add("retryAfter-rate-10", p).
		allow(1, 5, T, true).
		retry(1, T, 100). // target = s + 1000: ceilDiv(10T + 1000, 10) - T
		allow(1, 1, T+99, false).
		allow(1, 1, T+100, true)
	s.add("retryAfter-rate-3-rounds-up", rateBurst(3, 2)).
		// tolerance 1000; tat = 3T + 2000, target = 3T + 1000
		allow(1, 2, T, true).
		retry(1, T, 334).          // ceilDiv(3T+1000, 3) - T = ceil(333.3)
		allow(1, 1, T+333, false). // 3T + 999 < 3T + 1000
		allow(1, 1, T+334, true)
	s.add("retryAfter-unknown-key-is-0-and-not-created", p).
		retry(1, T, 0).size(0)
	s.add("retryAfter-0-when-conforming", p).
		allow(1, 4, T, true).retry(1, T, 0)
	s.add("tokensOf-unknown-key-is-burst-and-not-created", p).
		probe(tok, 1, T, 5).size(0)
	s.add("tokensOf-floors-partial-permits", p).
		allow(1, 5, T, true).
		probe(tok, 1, T+150, 1). // avail = 1500
		probe(tok, 1, T+299, 2)  // avail = 2990
	s.add("tokensOf-caps-at-burst", p).
		allow(1, 5, T, true).probe(tok, 1, T+10_000, 5) // avail 100000: min(5, 100)
	s.add("tokensOf-0-when-empty", p).
		allow(1, 5, T, true).probe(tok, 1, T, 0)
	s.add("tie-cost-equal-to-available-admits", p).
		allow(1, 3, T, true). // tat = s + 3000
		allow(1, 2, T, true). // s >= s + 3000 - 4000 + 1000: tat = s + 5000
		allow(1, 1, T, false)
	s.add("refused-request-consumes-nothing", p).
		allow(1, 3, T, true).
		allow(1, 3, T, false). // s < s + 3000 - 4000 + 2000
		probe(tok, 1, T, 2).   // avail = s - (s + 3000 - 5000)
		allow(1, 2, T, true)
	s.add("idle-time-does-not-bank-beyond-burst", p).
		allow(1, 5, T, true).allow(1, 5, T+60_000, true).allow(1, 1, T+60_000, false)
	// The engine caps GCRA's rate at 2^20/s so that now*rate fits an int64 for any time below
	// 2^43 ms; these cases sit at that edge (the reference model is exact beyond it).
	s.add("rate-2^20-at-time-2^42-scaled-time-2^62", rateBurst(1<<20, 2)).
		allow(1, 2, 1<<42, true).  // s = 2^62: tat = s + 2000
		allow(1, 1, 1<<42, false). // s < s + 2000 - 1000
		retry(1, 1<<42, 1).        // ceilDiv(s + 1000, 2^20) - 2^42 = ceilDiv(1000, 2^20)
		probe(tok, 1, 1<<42, 0).   // avail = s - (s + 2000 - 2000)
		allow(1, 1, 1<<42+1, true) // s + 2^20 >= s + 1000
	s.add("rate-2^20-burst-max", rateBurst(1<<20, MaxCount)).
		allow(1, MaxCount, T, true). // tat = s + L*1000
		allow(1, 1, T, false).
		retry(1, T, 1).          // target = s + 1000: ceilDiv(1000, 2^20)
		probe(tok, 1, T+1, 1048) // avail = s + 2^20 - (s + 1000L - 1000L) = 1048576: /1000
	s.add("several-keys-stateSize-counts-admitted-keys-only", p).
		allow(1, 1, T, true).allow(2, 6, T, false).allow(3, 0, T, true).size(2)
	const t45 = 1 << 45
	s.add("time-2^45-ms", p).
		allow(1, 5, t45, true).retry(1, t45, 100).allow(1, 1, t45+99, false).allow(1, 1, t45+100, true)
	bucketWalks(s)
	s.walk("random-walk-rate-2^20-burst-max", rateBurst(1<<20, MaxCount), 136, walkSpec{keys: 2, start: T, maxDt: 2, jumpDt: 2000, maxCost: MaxCount, steps: 60})
}

func rateCap(rate, capacity int64) map[string]int64 {
	return map[string]int64{"ratePerSec": rate, "capacity": capacity}
}

// leakyBucket pins docs/policies.md "leaky bucket". Unless a case says otherwise: rate 10/s, capacity
// 3, so drainMs = ceilDiv(3000, 10) = 300.
func leakyBucket(s *set) {
	const lvl = reference.CallLevelOf
	p := rateCap(10, 3)

	s.add("levelOf-unknown-key-is-0-and-not-created", p).
		probe(lvl, 1, T, 0).size(0)
	s.add("fills-to-capacity-then-refuses", p).
		allow(1, 1, T, true).allow(1, 1, T, true).allow(1, 1, T, true).allow(1, 1, T, false).
		probe(lvl, 1, T, 3)
	s.add("drains-one-unit-per-100ms", p).
		allow(1, 3, T, true).
		probe(lvl, 1, T+99, 3).  // credit 990
		probe(lvl, 1, T+100, 2). // credit 1000: drained 1
		probe(lvl, 1, T+250, 1). // credit 1500: drained 1, credit 500
		probe(lvl, 1, T+300, 0)  // credit 1000: drained 1 >= level 1
	s.add("emptying-drops-credit", rateCap(3, 2)).
		// drainMs = ceilDiv(2000, 3) = 667
		allow(1, 2, T, true).
		probe(lvl, 1, T+1000, 0). // dt 667: credit 2001, drained 2 >= 2: level 0, credit 0
		allow(1, 2, T+1000, true).
		retry(1, T+1000, 334) // ceilDiv(1000-0, 3); 333 had credit 1 been kept
	s.add("partial-drain-keeps-credit", rateCap(3, 3)).
		// drainMs = 1000
		allow(1, 3, T, true).
		probe(lvl, 1, T+500, 2). // credit 1500: drained 1, credit 500
		probe(lvl, 1, T+667, 1). // credit 500 + 501 = 1001: drained 1, credit 1
		allow(1, 2, T+667, true).
		retry(1, T+667, 333) // ceilDiv(1000-1, 3)
	s.add("retryAfter-is-ceilDiv-of-missing-credit", p).
		allow(1, 3, T, true).
		retry(1, T, 100).
		retry(1, T+50, 50). // credit 500: ceilDiv(500, 10)
		allow(1, 1, T+99, false).
		allow(1, 1, T+100, true)
	s.add("retryAfter-unknown-key-is-0-and-not-created", p).
		retry(1, T, 0).size(0)
	s.add("retryAfter-0-below-capacity", p).
		allow(1, 2, T, true).retry(1, T, 0)
	s.add("cost-above-capacity-refused-key-still-tracked", p).
		allow(1, 4, T, false).size(1).probe(lvl, 1, T, 0).allow(1, 3, T, true)
	s.add("cost-2^62-refused-without-overflow", p).
		allow(1, Huge, T, false).size(1).probe(lvl, 1, T, 0)
	s.add("cost-zero-admitted-creates-key", p).
		allow(1, 0, T, true).size(1).probe(lvl, 1, T, 0)
	s.add("cost-zero-admitted-when-full", p).
		allow(1, 3, T, true).allow(1, 0, T, true).probe(lvl, 1, T, 3)
	s.add("tie-level-plus-cost-equal-to-capacity-admits", p).
		allow(1, 2, T, true).allow(1, 1, T, true).allow(1, 1, T, false)
	s.add("refused-request-consumes-nothing", p).
		allow(1, 2, T, true).allow(1, 2, T, false).probe(lvl, 1, T, 2).allow(1, 1, T, true)
	s.add("levelOf-rolls-forward", p).
		allow(1, 3, T, true).probe(lvl, 1, T+100, 2).probe(lvl, 1, T+200, 1).probe(lvl, 1, T+10_000, 0)
	s.add("rate-1-per-second", rateCap(1, 1)).
		allow(1, 1, T, true).
		retry(1, T, 1000).
		allow(1, 1, T+999, false).
		allow(1, 1, T+1000, true)
	s.add("rate-2500-several-units-per-ms", rateCap(2500, 10)).
		allow(1, 10, T, true).
		probe(lvl, 1, T+1, 8). // credit 2500: drained 2, credit 500
		probe(lvl, 1, T+2, 5). // credit 3000: drained 3
		retry(1, T+2, 0)
	s.add("rate-max-capacity-max", rateCap(MaxCount, MaxCount)).
		// drainMs = 1000; at +1: credit 4294967295, drained 4294967, credit 295
		allow(1, MaxCount, T, true).
		allow(1, 1, T, false).
		probe(lvl, 1, T+1, MaxCount-4_294_967).
		probe(lvl, 1, T+1000, 0)
	s.add("several-keys-are-independent", p).
		allow(1, 3, T, true).allow(2, 1, T, true).allow(1, 1, T, false).allow(2, 2, T, true).
		allow(3, 4, T, false).size(3)
	const t45 = 1 << 45
	s.add("time-2^45-ms", p).
		allow(1, 3, t45, true).retry(1, t45, 100).allow(1, 1, t45+99, false).allow(1, 1, t45+100, true)
	s.walk("random-walk-rate-10-capacity-3", p, 141, walkSpec{keys: 2, start: T, maxDt: 50, jumpDt: 1000, maxCost: 2, steps: 80})
	s.walk("random-walk-rate-3-capacity-5", rateCap(3, 5), 142, walkSpec{keys: 2, start: T, maxDt: 300, jumpDt: 5000, maxCost: 3, steps: 80})
	s.walk("random-walk-rate-max-capacity-max", rateCap(MaxCount, MaxCount), 143, walkSpec{keys: 2, start: T, maxDt: 2, jumpDt: 2000, maxCost: MaxCount, steps: 60})
	s.walk("random-walk-costs-above-capacity", rateCap(7, 3), 144, walkSpec{keys: 2, start: T, maxDt: 200, jumpDt: 3000, maxCost: 5, steps: 60})
	s.honourWalk("retryAfter-honoured-rate-10-capacity-3", p, 241, T, 200)
	s.honourWalk("retryAfter-honoured-rate-3-capacity-4", rateCap(3, 4), 242, T, 900)
}

func perMin(requests, tokens int64) map[string]int64 {
	return map[string]int64{"requestsPerMin": requests, "tokensPerMin": tokens}
}

// dualBucket pins docs/policies.md "dual bucket". Unless a case says otherwise: 3 requests and 100
// tokens per minute; credits are in 1/60000 of a unit, so requests refill one per 20,000 ms.
func dualBucket(s *set) {
	const req, tok = reference.CallRequestsOf, reference.CallTokensOf
	p := perMin(3, 100)

	s.add("probes-of-unknown-key-are-full-and-create-nothing", p).
		probe(req, 1, T, 3).probe(tok, 1, T, 100).retry(1, T, 0).size(0)
	s.add("each-call-spends-one-request", p).
		allow(1, 1, T, true).allow(1, 1, T, true).allow(1, 1, T, true).
		allow(1, 1, T, false). // no request left, though 97 tokens are
		probe(tok, 1, T, 97).probe(req, 1, T, 0)
	s.add("tokens-dimension-refuses-alone", p).
		allow(1, 100, T, true).allow(1, 1, T, false).probe(req, 1, T, 2)
	s.add("cost-zero-still-spends-a-request", p).
		allow(1, 0, T, true).allow(1, 0, T, true).allow(1, 0, T, true).allow(1, 0, T, false).
		probe(tok, 1, T, 100)
	s.add("cost-zero-admitted-creates-key", p).
		allow(1, 0, T, true).size(1).probe(req, 1, T, 2)
	s.add("cost-above-tokensPerMin-refused-key-still-tracked", p).
		allow(1, 101, T, false).size(1).probe(req, 1, T, 3).probe(tok, 1, T, 100)
	s.add("cost-2^62-refused-without-overflow", p).
		allow(1, Huge, T, false).size(1).probe(req, 1, T, 3)
	s.add("refused-request-consumes-neither-dimension", p).
		allow(1, 60, T, true).allow(1, 50, T, false).probe(req, 1, T, 2).probe(tok, 1, T, 40)
	s.add("tie-cost-equal-to-tokens-admits", p).
		allow(1, 60, T, true).allow(1, 40, T, true).probe(tok, 1, T, 0)
	s.add("requests-refill-one-per-20s", p).
		allow(1, 1, T, true).allow(1, 1, T, true).allow(1, 1, T, true).
		probe(req, 1, T+19_999, 0). // credit 3*19999 = 59997
		probe(req, 1, T+20_000, 1)  // credit 60000
	s.add("tokens-refill-fractions-7-per-minute", perMin(10, 7)).
		allow(1, 7, T, true).
		probe(tok, 1, T+8571, 0). // credit 7*8571 = 59997
		probe(tok, 1, T+8572, 1). // credit 60004: 1, credit 4
		allow(1, 1, T+8572, true).
		retry(1, T+8572, 8571) // ceilDiv(60000-4, 7) = ceil(8570.9)
	s.add("refill-saturates-and-drops-credit", perMin(10, 7)).
		allow(1, 6, T, true). // tokens 1
		// credit 7*55000 = 385000: +6 = 7 = capacity, credit 25000 dropped
		probe(tok, 1, T+55_000, 7).
		allow(1, 7, T+55_000, true).
		retry(1, T+55_000, 8572) // ceilDiv(60000-0, 7); 5000 had credit 25000 been kept
	s.add("refill-clamped-to-60000", perMin(3, 100)).
		allow(1, 100, T, true).
		probe(tok, 1, T+1_000_000, 100).probe(req, 1, T+1_000_000, 3)
	s.add("retryAfter-requests-dimension", p).
		allow(1, 1, T, true).allow(1, 1, T, true).allow(1, 1, T, true).
		retry(1, T, 20_000). // ceilDiv(60000, 3); tokens: 0
		allow(1, 1, T+19_999, false).
		allow(1, 1, T+20_000, true)
	s.add("retryAfter-tokens-dimension", perMin(10, 2)).
		allow(1, 2, T, true).
		retry(1, T, 30_000) // ceilDiv(60000, 2); requests: 0
	s.add("retryAfter-is-the-larger-of-both-waits", perMin(3, 2)).
		allow(1, 2, T, true).allow(1, 0, T, true).allow(1, 0, T, true).
		retry(1, T, 30_000) // max(ceilDiv(60000, 3), ceilDiv(60000, 2))
	s.add("retryAfter-unknown-key-is-0-and-not-created", p).
		retry(1, T, 0).size(0)
	s.add("probes-roll-forward", p).
		allow(1, 100, T, true).
		probe(tok, 1, T+600, 1).probe(req, 1, T+600, 2). // 100*600 = 60000; 3*600 = 1800
		probe(tok, 1, T+30_000, 50).probe(req, 1, T+30_000, 3)
	s.add("several-keys-are-independent", p).
		allow(1, 100, T, true).allow(2, 1, T, true).allow(1, 1, T, false).allow(2, 99, T, true).
		allow(3, 101, T, false).size(3)
	s.add("per-minute-max", perMin(MaxCount, MaxCount)).
		allow(1, MaxCount, T, true).
		probe(tok, 1, T, 0).
		probe(tok, 1, T+1, 71_582).  // floor((2^32-1)/60000)
		probe(req, 1, T+1, MaxCount) // 2^32-2 + 71582, saturated
	const t45 = 1 << 45
	s.add("time-2^45-ms", p).
		allow(1, 1, t45, true).allow(1, 1, t45, true).allow(1, 1, t45, true).
		retry(1, t45, 20_000).allow(1, 1, t45+20_000, true)
	s.walk("random-walk-3-requests-100-tokens", p, 151, walkSpec{keys: 2, start: T, maxDt: 5000, jumpDt: 100_000, maxCost: 40, steps: 80})
	s.walk("random-walk-60-requests-7-tokens", perMin(60, 7), 152, walkSpec{keys: 2, start: T, maxDt: 3000, jumpDt: 60_000, maxCost: 3, steps: 80})
	s.walk("random-walk-per-minute-max", perMin(MaxCount, MaxCount), 153, walkSpec{keys: 2, start: T, maxDt: 20, jumpDt: 70_000, maxCost: MaxCount, steps: 60})
	s.walk("random-walk-costs-above-tokens", perMin(5, 4), 154, walkSpec{keys: 2, start: T, maxDt: 6000, jumpDt: 60_000, maxCost: 6, steps: 60})
	s.honourWalk("retryAfter-honoured-3-requests-100-tokens", p, 251, T, 10_000)
	s.honourWalk("retryAfter-honoured-20-requests-5-tokens", perMin(20, 5), 252, T, 15_000)
}
