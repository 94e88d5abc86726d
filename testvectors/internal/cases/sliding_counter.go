package cases

import "github.com/slidelimit/slidelimit/internal/reference"

func win(limit, windowMs int64) map[string]int64 {
	return map[string]int64{"limit": limit, "windowMs": windowMs}
}

// slidingCounter pins docs/policies.md ("Sliding window counter"). Unless a case says otherwise:
// limit 5, window 1000 ms, key 1, and T is a window start. In the comments, "carried" is
// floor(previous*(W-elapsed)/W).
func slidingCounter(s *set) {
	const est = reference.CallEstimateOf
	p := win(5, 1000)

	// Admission, ties, costs.
	s.add("first-allow-creates-key-and-admits", p).
		allow(1, 1, T, true).size(1).probe(est, 1, T, 1)
	s.add("admits-up-to-limit-then-refuses", p).
		allow(1, 1, T, true).allow(1, 1, T+1, true).allow(1, 1, T+2, true).allow(1, 1, T+3, true).
		allow(1, 1, T+4, true).
		allow(1, 1, T+5, false). // 5+1 > 5
		probe(est, 1, T+5, 5)
	s.add("tie-cost-equal-to-remaining-admits", p).
		allow(1, 3, T, true).
		allow(1, 2, T+1, true). // 3+2 = 5 <= 5
		allow(1, 1, T+2, false)
	s.add("cost-one-above-remaining-refused-and-consumes-nothing", p).
		allow(1, 3, T, true).
		allow(1, 3, T+1, false). // 3+3 > 5
		probe(est, 1, T+1, 3).
		allow(1, 2, T+2, true)
	s.add("cost-equal-to-limit-on-new-key-admits", p).
		allow(1, 5, T, true).allow(1, 1, T, false)
	s.add("cost-above-limit-refused-new-key-still-tracked", p).
		allow(1, 6, T, false).size(1).probe(est, 1, T, 0).allow(1, 5, T, true)
	s.add("cost-above-limit-refused-existing-key-unchanged", p).
		allow(1, 2, T, true).allow(1, 6, T+1, false).probe(est, 1, T+1, 2).
		allow(1, 3, T+2, true).allow(1, 1, T+3, false)
	s.add("cost-2^62-refused-without-overflow", p).
		allow(1, Huge, T, false).size(1).allow(1, 5, T, true)
	s.add("cost-zero-admitted-and-creates-key", p).
		allow(1, 0, T, true).size(1).probe(est, 1, T, 0).allow(1, 5, T, true)
	s.add("cost-zero-admitted-at-limit-consumes-nothing", p).
		allow(1, 5, T, true).allow(1, 0, T+1, true).probe(est, 1, T+1, 5).allow(1, 1, T+1, false)
	s.add("negative-cost-refused-consumes-nothing", p).
		allow(1, 2, T, true).allow(1, -1, T, false).probe(est, 1, T, 2).allow(1, 3, T, true)

	// The floor.
	s.add("floor-admits-what-exact-4.995-would-refuse", p).
		allow(1, 5, T, true).
		allow(1, 1, T+1000, false). // elapsed 0: carried 5*1000/1000 = 5
		allow(1, 1, T+1001, true).  // elapsed 1: floor(5*999/1000) = floor(4.995) = 4; 4+0+1 <= 5
		probe(est, 1, T+1001, 5).   // 4 + 1
		allow(1, 1, T+1001, false)
	s.add("floor-carried-999-of-1000-one-ms-in", win(1000, 1000)).
		allow(1, 1000, T, true).
		allow(1, 2, T+1001, false). // floor(1000*999/1000) = 999; 999+2 > 1000
		allow(1, 1, T+1001, true)
	s.add("floor-last-ms-of-next-window-still-carries-1", win(1000, 1000)).
		allow(1, 1000, T, true).
		probe(est, 1, T+1999, 1). // floor(1000*1/1000) = 1
		allow(1, 1000, T+1999, false).
		allow(1, 999, T+1999, true)
	s.add("floor-small-previous-reaches-zero-early", p).
		allow(1, 5, T, true).
		probe(est, 1, T+1800, 1). // floor(5*200/1000) = 1
		probe(est, 1, T+1801, 0). // floor(5*199/1000) = floor(0.995) = 0
		allow(1, 5, T+1801, true)

	// Rolling, decay and gaps.
	s.add("estimate-decays-linearly-over-next-window", win(10, 1000)).
		allow(1, 10, T, true).
		probe(est, 1, T+1000, 10).
		probe(est, 1, T+1250, 7). // floor(10*750/1000) = floor(7.5)
		probe(est, 1, T+1500, 5).
		probe(est, 1, T+1999, 0). // floor(10*1/1000)
		probe(est, 1, T+2000, 0)  // previous is window T+1000's current: 0
	s.add("estimate-adds-current-to-carried", win(10, 1000)).
		allow(1, 8, T+500, true).
		allow(1, 2, T+1200, true). // carried floor(8*800/1000) = floor(6.4) = 6; 6+0+2 <= 10
		probe(est, 1, T+1200, 8).
		allow(1, 3, T+1200, false). // 6+2+3 > 10
		allow(1, 2, T+1200, true)   // 6+2+2 = 10
	s.add("adjacent-window-carries-count-undecayed-at-edge", p).
		allow(1, 5, T+999, true).
		allow(1, 1, T+1000, false). // carried 5*1000/1000 = 5
		probe(est, 1, T+1000, 5)
	s.add("windows-are-epoch-aligned-not-first-request-aligned", p).
		allow(1, 5, T+600, true).
		probe(est, 1, T+1100, 4) // window T+1000, elapsed 100: floor(5*900/1000) = floor(4.5)
	s.add("window-alignment-with-7ms-window", win(3, 7)).
		// T mod 7 = 1 (10^5 = 5 mod 7, 17*10^11 = 3*5 = 1 mod 7): T lies 1 ms into window T-1.
		allow(1, 3, T, true).
		retry(1, T, 7).          // need < 0: (T-1) + 7 - T + 1
		allow(1, 1, T+5, false). // same window T-1
		allow(1, 1, T+6, false). // window T+6, elapsed 0: carried 3
		allow(1, 1, T+7, true).  // elapsed 1: floor(3*6/7) = floor(2.57) = 2; 2+0+1 <= 3
		probe(est, 1, T+7, 3)
	s.add("gap-of-two-windows-clears-both-counts", p).
		allow(1, 5, T+999, true).
		allow(1, 5, T+2000, true). // window T+2000 is not T+1000: previous 0, not 5
		probe(est, 1, T+2000, 5)
	s.add("gap-uses-last-touched-window-not-previous-of-previous", win(10, 1000)).
		allow(1, 10, T, true).allow(2, 10, T, true).
		allow(1, 5, T+1500, true). // carried floor(10*500/1000) = 5; 5+0+5 <= 10
		allow(2, 5, T+1500, true).
		probe(est, 1, T+2500, 2). // window T+2000: previous 5, floor(5*500/1000) = floor(2.5)
		probe(est, 2, T+3000, 0)  // from window T+1000 straight to T+3000: cleared
	s.add("gap-of-a-day-clears", p).
		allow(1, 5, T, true).allow(1, 5, T+86_400_000, true).probe(est, 1, T+86_400_000, 5)
	s.add("refused-requests-do-not-carry-into-next-window", p).
		allow(1, 5, T, true).
		allow(1, 1, T+500, false).allow(1, 1, T+600, false).allow(1, 1, T+700, false).
		allow(1, 1, T+1001, true). // carried floor(4.995) = 4: only the 5 admitted count
		allow(1, 1, T+1001, false)
	s.add("cost-zero-does-not-carry-into-next-window", p).
		allow(1, 0, T, true).allow(1, 0, T+1, true).allow(1, 0, T+2, true).
		allow(1, 5, T+1000, true) // previous 0

	// retryAfter.
	s.add("retryAfter-unknown-key-is-0-and-not-created", p).
		retry(9, T, 0).size(0).probe(est, 9, T, 0).size(0).
		allow(1, 1, T, true).retry(2, T, 0).size(1)
	s.add("retryAfter-0-while-below-limit", p).
		allow(1, 4, T, true).retry(1, T, 0).
		allow(1, 1, T, true).
		retry(1, T, 1001) // need = 5-5-1 < 0: T + 1000 - T + 1
	s.add("retryAfter-edge-plus-1ms-from-mid-window", p).
		allow(1, 5, T+200, true).
		retry(1, T+200, 801). // T+1000 - (T+200) + 1
		allow(1, 1, T+1000, false).
		allow(1, 1, T+1001, true)
	s.add("retryAfter-edge-plus-1ms-honoured-exactly", p).
		allow(1, 5, T, true).
		retry(1, T+999, 2).         // T+1000 - (T+999) + 1
		allow(1, 1, T+1000, false). // now + retryAfter - 1: carried 5
		allow(1, 1, T+1001, true)   // now + retryAfter: floor(4.995) = 4
	s.add("retryAfter-edge-plus-1ms-when-current-alone-is-full", p).
		allow(1, 2, T, true).
		allow(1, 5, T+1999, true). // carried floor(2*1/1000) = 0
		retry(1, T+1999, 2).       // need = 5-5-1 < 0: T+2000 - (T+1999) + 1
		allow(1, 1, T+2000, false).
		allow(1, 1, T+2001, true)
	s.add("retryAfter-solved-with-previous-and-current", p).
		allow(1, 5, T, true).
		allow(1, 3, T+1500, true). // carried floor(5*500/1000) = 2; 2+0+3 <= 5
		// need = 5-3-1 = 1, excess = 5-1-1 = 3, target = floor(1000*3/5)+1 = 601, wait 601-500
		retry(1, T+1500, 101).
		allow(1, 1, T+1600, false). // elapsed 600: floor(5*400/1000) = 2; 2+3+1 > 5
		allow(1, 1, T+1601, true)   // elapsed 601: floor(5*399/1000) = floor(1.995) = 1; 1+3+1 <= 5
	s.add("retryAfter-solved-limit-3-waits-234ms", win(3, 1000)).
		allow(1, 3, T, true).
		allow(1, 1, T+1100, true). // floor(3*900/1000) = floor(2.7) = 2; 2+0+1 <= 3
		// need = 3-1-1 = 1, excess = 3-1-1 = 1, target = floor(1000/3)+1 = 334, wait 334-100
		retry(1, T+1100, 234).
		allow(1, 1, T+1333, false). // floor(3*667/1000) = floor(2.001) = 2; 2+1+1 > 3
		allow(1, 1, T+1334, true)   // floor(3*666/1000) = floor(1.998) = 1; 1+1+1 <= 3
	const t0 = 1_700_000_040_000 // 28,333,334 * 60,000: a minute-window start
	s.add("retryAfter-solved-minute-window-waits-30s", win(2, 60_000)).
		allow(1, 2, t0, true).
		allow(1, 1, t0+60_001, true). // floor(2*59999/60000) = 1; 1+0+1 <= 2
		// need = 2-1-1 = 0, excess = 2-0-1 = 1, target = floor(60000/2)+1 = 30001, wait 30001-1
		retry(1, t0+60_001, 30_000).
		allow(1, 1, t0+90_000, false). // floor(2*30000/60000) = 1; 1+1+1 > 2
		allow(1, 1, t0+90_001, true)   // floor(2*29999/60000) = 0
	s.add("retryAfter-1-at-first-ms-after-full-window", p).
		allow(1, 5, T, true).
		retry(1, T+1000, 1). // need = 4, excess = 5-4-1 = 0, target = 0+1, wait 1-0
		allow(1, 1, T+1001, true)
	s.add("retryAfter-0-when-previous-alone-leaves-room", p).
		allow(1, 5, T, true).
		retry(1, T+1500, 0). // carried floor(5*500/1000) = 2 < 5
		allow(1, 3, T+1500, true)
	s.add("retryAfter-after-two-window-gap-is-0", p).
		allow(1, 5, T, true).retry(1, T+2500, 0).probe(est, 1, T+2500, 0)
	s.add("retryAfter-unaffected-by-refused-request", p).
		allow(1, 4, T, true).allow(1, 2, T+1, false).retry(1, T+1, 0).allow(1, 1, T+1, true)

	// estimateOf.
	s.add("estimateOf-unknown-key-is-0-and-not-created", p).
		probe(est, 7, T, 0).size(0)
	s.add("estimateOf-rolls-forward-across-windows", win(10, 1000)).
		allow(1, 4, T, true).
		probe(est, 1, T+1000, 4).
		probe(est, 1, T+1500, 2). // floor(4*500/1000)
		probe(est, 1, T+2000, 0). // window T+2000: previous = window T+1000's 0
		allow(1, 10, T+2000, true)

	// Keys and stateSize.
	s.add("several-keys-are-independent", p).
		allow(1, 5, T, true).allow(2, 5, T, true).allow(1, 1, T, false).allow(3, 1, T, true).
		allow(2, 1, T+1, false).size(3).probe(est, 1, T+1, 5).probe(est, 3, T+1, 1)
	many := s.add("stateSize-counts-every-key-ever-seen", p)
	for k := int64(1); k <= 10; k++ {
		many.allow(k, 1, T+k, true)
	}
	many.size(10).allow(11, 1, T+10_000_000, true).size(11)
	s.add("stateSize-counts-refused-new-keys", p).
		allow(1, 6, T, false).allow(2, 7, T, false).allow(3, 1, T, true).size(3)
	s.add("stateSize-unchanged-by-probes-of-unknown-keys", p).
		allow(1, 1, T, true).retry(2, T, 0).probe(est, 3, T, 0).size(1)
	s.add("large-key-values", p).
		allow(1<<62, 5, T, true).allow(1<<62, 1, T, false).allow(0, 1, T, true).size(2)

	// Extremes of the parameters and of time.
	s.add("limit-1", win(1, 1000)).
		allow(1, 1, T, true).
		allow(1, 1, T+999, false).
		allow(1, 1, T+1000, false). // carried 1
		retry(1, T+1000, 1).        // need = 0, excess = 0, target = 1
		allow(1, 1, T+1001, true)   // floor(1*999/1000) = 0
	s.add("limit-max-admits-whole-limit-then-refuses", win(MaxCount, 1000)).
		allow(1, MaxCount, T, true).allow(1, 1, T, false).probe(est, 1, T, MaxCount)
	s.add("limit-max-floor-one-ms-into-next-window", win(MaxCount, 1000)).
		allow(1, MaxCount, T, true).
		// floor(4294967295*999/1000) = floor(4290672327705/1000) = 4290672327
		probe(est, 1, T+1001, 4_290_672_327).
		allow(1, 4_294_968, T+1001, true). // 4294967295 - 4290672327
		allow(1, 1, T+1001, false)
	s.add("limit-max-cost-above-limit-refused", win(MaxCount, 1000)).
		allow(1, MaxCount+1, T, false).size(1).allow(1, MaxCount, T, true)
	s.add("limit-max-tie", win(MaxCount, 1000)).
		allow(1, MaxCount-1, T, true).allow(1, 1, T, true).allow(1, 1, T, false)
	const tw = TMaxWindow
	s.add("limit-max-window-max-product-needs-64-bits", win(MaxCount, MaxWindow)).
		allow(1, MaxCount, tw+MaxWindow-1, true).
		// (2^32-1)^2 / 2^32 = 2^32 - 2 + 2^-32: floor 2^32-2
		probe(est, 1, tw+MaxWindow+1, MaxCount-1).
		allow(1, 1, tw+MaxWindow+1, true).
		allow(1, 1, tw+MaxWindow+1, false).
		// need = L-2, excess = 1, target = floor(2^32/(2^32-1)) + 1 = 2, wait 2-1
		retry(1, tw+MaxWindow+1, 1).
		// (2^32-1)(2^32-2)/2^32 = 2^32 - 3 + 2^-31: floor L-2; L-2+1+1 <= L
		allow(1, 1, tw+MaxWindow+2, true)
	s.add("limit-max-window-max-retry-edge-plus-1ms", win(MaxCount, MaxWindow)).
		allow(1, MaxCount, tw, true).
		retry(1, tw, MaxWindow+1).
		allow(1, 1, tw+MaxWindow, false).
		allow(1, 1, tw+MaxWindow+1, true) // carried L-1
	s.add("limit-max-window-max-half-window-estimate", win(MaxCount, MaxWindow)).
		allow(1, MaxCount, tw, true).
		probe(est, 1, tw+MaxWindow+MaxWindow/2, 1<<31-1) // floor((2^32-1)*2^31/2^32) = 2^31-1
	s.add("window-1ms-retryAfter-is-2", win(2, 1)).
		allow(1, 2, T, true).allow(1, 1, T, false).
		retry(1, T, 2).          // T+1 - T + 1
		allow(1, 1, T+1, false). // carried 2*1/1 = 2
		allow(1, 1, T+2, true)   // window T+2 is two past T: cleared
	s.add("window-1ms-each-ms-is-a-window", win(2, 1)).
		allow(1, 1, T, true).
		allow(1, 1, T+1, true). // carried 1: 1+0+1 <= 2
		allow(1, 1, T+1, false).
		allow(1, 2, T+2, false). // carried = window T+1's count, 1; 1+0+2 > 2
		allow(1, 1, T+2, true)
	s.add("window-30-days-solved-wait", win(100, Month)).
		allow(1, 100, TMonth+1000, true).
		allow(1, 1, TMonth+Month, false).  // carried 100
		retry(1, TMonth+Month, 1).         // need 99, excess 0, target 1
		allow(1, 1, TMonth+Month+1, true). // floor(100*(Month-1)/Month) = 99
		// need = 100-1-1 = 98, excess = 1, target = floor(2592000000/100)+1 = 25920001, wait -1
		retry(1, TMonth+Month+1, 25_920_000).
		allow(1, 1, TMonth+Month+25_920_000, false). // floor(100*2566080000/2592000000) = 99
		allow(1, 1, TMonth+Month+25_920_001, true)   // floor(100*2566079999/2592000000) = 98
	s.add("window-30-days-retry-edge-plus-1ms", win(100, Month)).
		allow(1, 100, TMonth, true).
		retry(1, TMonth, Month+1).
		allow(1, 1, TMonth+Month, false).
		allow(1, 1, TMonth+Month+1, true)
	s.add("window-30-days-gap-clears", win(100, Month)).
		allow(1, 100, TMonth, true).allow(1, 100, TMonth+2*Month, true)
	s.add("times-cross-2^31-ms", win(4, 1<<31)).
		allow(1, 4, 1<<31-1, true). // window 0
		allow(1, 1, 1<<31, false).  // window 2^31, elapsed 0: carried 4
		allow(1, 1, 1<<31+1, true). // floor(4*(2^31-1)/2^31) = 3
		probe(est, 1, 1<<31+1, 4)
	s.add("times-cross-2^32-ms", win(3, 1<<32)).
		allow(1, 3, 1<<32-1, true).
		probe(est, 1, 1<<32+1, 2). // floor(3*(2^32-1)/2^32)
		allow(1, 1, 1<<32+1, true).
		allow(1, 1, 1<<32+1, false)
	const t45 = 1 << 45 // 35,184,372,088,832: 832 ms into window 35,184,372,088,000
	s.add("time-2^45-ms", p).
		allow(1, 5, t45, true).
		retry(1, t45, 169). // 1000 - 832 + 1
		allow(1, 1, t45+168, false).
		allow(1, 1, t45+169, true) // floor(4.995) = 4

	// Random walks, and waits checked by the generator to be exact.
	s.walk("random-walk-limit-5-window-1000", p, 101, walkSpec{keys: 3, start: T, maxDt: 150, jumpDt: 3000, maxCost: 3, steps: 80})
	s.walk("random-walk-limit-3-window-7", win(3, 7), 102, walkSpec{keys: 1, start: T, maxDt: 2, jumpDt: 20, maxCost: 2, steps: 80})
	s.walk("random-walk-limit-100-window-60000", win(100, 60_000), 103, walkSpec{keys: 2, start: T, maxDt: 500, jumpDt: 200_000, maxCost: 60, steps: 80})
	s.walk("random-walk-limit-1-window-1", win(1, 1), 104, walkSpec{keys: 2, start: T, maxDt: 2, jumpDt: 5, maxCost: 1, steps: 60})
	s.walk("random-walk-limit-max-window-max", win(MaxCount, MaxWindow), 105, walkSpec{keys: 2, start: TMaxWindow, maxDt: 1 << 28, jumpDt: 1 << 32, maxCost: MaxCount, steps: 60})
	s.walk("random-walk-limit-10-window-30-days", win(10, Month), 106, walkSpec{keys: 2, start: TMonth, maxDt: 50_000_000, jumpDt: 4_000_000_000, maxCost: 4, steps: 60})
	s.walk("random-walk-20-keys", win(2, 500), 107, walkSpec{keys: 20, start: T, maxDt: 6, jumpDt: 1000, maxCost: 2, steps: 120})
	s.walk("random-walk-costs-above-limit", win(3, 100), 108, walkSpec{keys: 3, start: T, maxDt: 20, jumpDt: 300, maxCost: 5, steps: 60})
	s.honourWalk("retryAfter-honoured-limit-5-window-1000", p, 201, T, 300)
	s.honourWalk("retryAfter-honoured-limit-7-window-60000", win(7, 60_000), 202, T, 20_000)
	s.honourWalk("retryAfter-honoured-limit-3-window-30-days", win(3, Month), 203, TMonth, Month/3)
	s.honourWalk("retryAfter-honoured-limit-max-window-max", win(MaxCount, MaxWindow), 204, TMaxWindow, MaxWindow/2)
	s.honourWalk("retryAfter-honoured-limit-2-window-3", win(2, 3), 205, T, 2)
}
