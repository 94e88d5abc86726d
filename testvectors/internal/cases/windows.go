package cases

import "github.com/slidelimit/slidelimit/internal/reference"

// slidingLog pins docs/policies.md "sliding log". Unless a case says otherwise: limit 3, window
// 1000 ms, key 1. The window is (now-W, now]: a timestamp t has left once t <= now - W.
func slidingLog(s *set) {
	const cnt = reference.CallCountOf
	p := win(3, 1000)

	s.add("admits-up-to-limit-then-refuses", p).
		allow(1, 1, T, true).allow(1, 1, T+1, true).allow(1, 1, T+2, true).
		allow(1, 1, T+3, false).probe(cnt, 1, T+3, 3)
	s.add("oldest-leaves-at-exactly-windowMs", p).
		allow(1, 1, T, true).allow(1, 2, T+10, true).
		allow(1, 1, T+999, false). // T > T+999-1000: still inside
		allow(1, 1, T+1000, true). // T <= T+1000-1000: gone
		probe(cnt, 1, T+1000, 3)
	s.add("retryAfter-is-oldest-plus-window-without-extra-ms", p).
		allow(1, 1, T, true).allow(1, 1, T+100, true).allow(1, 1, T+200, true).
		retry(1, T+300, 700).      // T + 1000 - (T+300)
		allow(1, 1, T+999, false). // now + retryAfter - 1
		allow(1, 1, T+1000, true). // now + retryAfter
		retry(1, T+1000, 100)      // the oldest is now T+100
	s.add("retryAfter-0-below-limit", p).
		allow(1, 2, T, true).retry(1, T, 0)
	s.add("retryAfter-unknown-key-is-0-and-not-created", p).
		retry(5, T, 0).size(0)
	s.add("countOf-unknown-key-is-0-and-not-created", p).
		probe(cnt, 5, T, 0).size(0)
	s.add("cost-pushes-that-many-copies-which-leave-together", p).
		allow(1, 2, T, true).probe(cnt, 1, T, 2).
		allow(1, 2, T+1, false).
		allow(1, 1, T+1, true).
		retry(1, T+1, 999).        // oldest T + 1000 - (T+1)
		allow(1, 2, T+1000, true). // both copies of T leave at once
		probe(cnt, 1, T+1000, 3)
	s.add("tie-cost-equal-to-remaining-admits", p).
		allow(1, 1, T, true).allow(1, 2, T+1, true).allow(1, 1, T+2, false)
	s.add("cost-above-limit-refused-new-key-still-tracked", p).
		allow(1, 4, T, false).size(1).probe(cnt, 1, T, 0).allow(1, 3, T, true)
	s.add("cost-above-limit-refused-existing-key-unchanged", p).
		allow(1, 1, T, true).allow(1, 4, T+1, false).probe(cnt, 1, T+1, 1).allow(1, 2, T+1, true)
	s.add("cost-2^62-refused-without-overflow", p).
		allow(1, Huge, T, false).size(1).probe(cnt, 1, T, 0)
	s.add("cost-zero-admitted-creates-key-stores-nothing", p).
		allow(1, 0, T, true).size(1).probe(cnt, 1, T, 0).
		allow(1, 3, T, true).
		allow(1, 0, T+1, true). // admitted at the limit, and adds nothing
		probe(cnt, 1, T+1, 3)
	s.add("refused-requests-are-not-stored", p).
		allow(1, 3, T, true).allow(1, 1, T+500, false).allow(1, 1, T+600, false).
		allow(1, 3, T+1000, true) // only the three of T were stored, and they have left
	s.add("countOf-rolls-forward", p).
		allow(1, 1, T, true).allow(1, 1, T+400, true).allow(1, 1, T+800, true).
		probe(cnt, 1, T+999, 3).probe(cnt, 1, T+1000, 2).probe(cnt, 1, T+1400, 1).probe(cnt, 1, T+1800, 0)
	s.add("retryAfter-expires-before-answering", p).
		allow(1, 3, T, true).
		retry(1, T+999, 1).
		retry(1, T+1000, 0)
	s.add("exact-never-more-than-limit-in-any-window", p).
		allow(1, 3, T+999, true).
		allow(1, 1, T+1000, false). // a window counter would start afresh here
		allow(1, 1, T+1998, false).
		allow(1, 1, T+1999, true) // T+999 <= T+1999-1000
	s.add("several-keys-are-independent", p).
		allow(1, 3, T, true).allow(2, 2, T, true).allow(1, 1, T, false).allow(2, 1, T, true).
		allow(3, 4, T, false).size(3).probe(cnt, 2, T, 3)
	s.add("window-1ms", win(2, 1)).
		allow(1, 2, T, true).allow(1, 1, T, false).
		retry(1, T, 1).        // T + 1 - T
		allow(1, 2, T+1, true) // T <= T+1-1
	s.add("window-30-days", win(2, Month)).
		allow(1, 1, TMonth+5, true).
		allow(1, 1, TMonth+Month, true).
		allow(1, 1, TMonth+Month+4, false).
		retry(1, TMonth+Month+4, 1). // TMonth+5 + Month - (TMonth+Month+4)
		allow(1, 1, TMonth+Month+5, true)
	s.add("window-2^32-ms", win(1, MaxWindow)).
		allow(1, 1, T, true).
		retry(1, T, MaxWindow).
		allow(1, 1, T+MaxWindow-1, false).
		allow(1, 1, T+MaxWindow, true)
	s.add("times-cross-2^31-ms", win(2, 1000)).
		allow(1, 1, 1<<31-1, true).allow(1, 1, 1<<31, true).
		allow(1, 1, 1<<31+998, false).
		retry(1, 1<<31+998, 1). // 2^31-1 + 1000 - (2^31+998)
		allow(1, 1, 1<<31+999, true)
	s.add("limit-1-window-60000", win(1, 60_000)).
		allow(1, 1, T, true).allow(1, 1, T+59_999, false).retry(1, T+59_999, 1).allow(1, 1, T+60_000, true)
	s.add("limit-10000-one-request-of-10000-copies", win(10_000, 1000)).
		allow(1, 10_000, T, true).
		allow(1, 1, T+999, false).
		probe(cnt, 1, T+999, 10_000).
		retry(1, T+999, 1).
		allow(1, 10_000, T+1000, true)
	s.walk("random-walk-limit-3-window-1000", p, 111, walkSpec{keys: 2, start: T, maxDt: 150, jumpDt: 3000, maxCost: 2, steps: 80})
	s.walk("random-walk-limit-5-window-10", win(5, 10), 112, walkSpec{keys: 2, start: T, maxDt: 2, jumpDt: 30, maxCost: 3, steps: 80})
	s.walk("random-walk-limit-20-window-30-days", win(20, Month), 113, walkSpec{keys: 2, start: TMonth, maxDt: 60_000_000, jumpDt: 4_000_000_000, maxCost: 6, steps: 80})
	s.walk("random-walk-costs-above-limit", win(2, 100), 114, walkSpec{keys: 3, start: T, maxDt: 40, jumpDt: 300, maxCost: 4, steps: 60})
	s.honourWalk("retryAfter-honoured-limit-3-window-1000", p, 211, T, 300)
	s.honourWalk("retryAfter-honoured-limit-6-window-30-days", win(6, Month), 212, TMonth, Month/4)
}

// fixedWindow pins docs/policies.md "fixed window". Unless a case says otherwise: limit 3, window
// 1000 ms, key 1, T a window start. Its retryAfter and countOf only read.
func fixedWindow(s *set) {
	const cnt = reference.CallCountOf
	p := win(3, 1000)

	s.add("admits-up-to-limit-in-a-window-then-refuses", p).
		allow(1, 1, T, true).allow(1, 1, T+1, true).allow(1, 1, T+2, true).
		allow(1, 1, T+3, false).probe(cnt, 1, T+3, 3)
	s.add("next-window-starts-afresh-boundary-burst", p).
		allow(1, 3, T+999, true).
		allow(1, 3, T+1000, true) // 6 within 2 ms: the fixed window's known flaw
	s.add("windows-are-epoch-aligned", p).
		allow(1, 3, T+600, true).allow(1, 1, T+999, false).allow(1, 1, T+1000, true)
	s.add("retryAfter-runs-to-window-end-without-extra-ms", p).
		allow(1, 3, T+200, true).
		retry(1, T+200, 800).      // T + 1000 - (T+200)
		allow(1, 1, T+999, false). // now + retryAfter - 1
		allow(1, 1, T+1000, true)  // now + retryAfter
	s.add("retryAfter-0-in-a-later-window", p).
		allow(1, 3, T, true).retry(1, T+1000, 0).probe(cnt, 1, T+1000, 0).allow(1, 3, T+1000, true)
	s.add("retryAfter-0-below-limit", p).
		allow(1, 2, T, true).retry(1, T, 0)
	s.add("retryAfter-unknown-key-is-0-and-not-created", p).
		retry(1, T, 0).size(0)
	s.add("countOf-unknown-key-is-0-and-not-created", p).
		probe(cnt, 1, T, 0).size(0)
	s.add("countOf-same-window", p).
		allow(1, 2, T+100, true).probe(cnt, 1, T+999, 2)
	s.add("probes-read-only-in-later-window", p).
		allow(1, 3, T, true).
		probe(cnt, 1, T+1500, 0). // another window: 0
		retry(1, T+1500, 0).
		size(1).
		allow(1, 3, T+1500, true).probe(cnt, 1, T+1500, 3)
	s.add("cost-above-limit-refused-new-key-still-tracked", p).
		allow(1, 4, T, false).size(1).probe(cnt, 1, T, 0).allow(1, 3, T, true)
	s.add("cost-above-limit-refused-existing-key-unchanged", p).
		allow(1, 1, T, true).allow(1, 4, T, false).probe(cnt, 1, T, 1)
	s.add("cost-2^62-refused-without-overflow", p).
		allow(1, Huge, T, false).size(1)
	s.add("cost-zero-admitted-creates-key", p).
		allow(1, 0, T, true).size(1).probe(cnt, 1, T, 0)
	s.add("cost-zero-admitted-at-limit", p).
		allow(1, 3, T, true).allow(1, 0, T+1, true).probe(cnt, 1, T+1, 3)
	s.add("tie-cost-equal-to-remaining-admits", p).
		allow(1, 1, T, true).allow(1, 2, T, true).allow(1, 1, T, false)
	s.add("refused-request-consumes-nothing", p).
		allow(1, 2, T, true).allow(1, 2, T, false).probe(cnt, 1, T, 2).allow(1, 1, T, true)
	s.add("several-keys-are-independent", p).
		allow(1, 3, T, true).allow(2, 1, T, true).allow(1, 1, T, false).allow(2, 2, T, true).
		allow(3, 9, T, false).size(3)
	s.add("gap-of-many-windows", p).
		allow(1, 3, T, true).allow(1, 3, T+86_400_000, true).probe(cnt, 1, T+86_400_000, 3)
	s.add("window-1ms", win(1, 1)).
		allow(1, 1, T, true).allow(1, 1, T, false).
		retry(1, T, 1). // T + 1 - T
		allow(1, 1, T+1, true)
	s.add("window-30-days", win(5, Month)).
		allow(1, 5, TMonth+Month-1, true).
		retry(1, TMonth+Month-1, 1).
		allow(1, 5, TMonth+Month, true).
		retry(1, TMonth+Month, Month)
	s.add("window-2^32-ms", win(2, MaxWindow)).
		allow(1, 2, TMaxWindow, true).
		retry(1, TMaxWindow, MaxWindow).
		allow(1, 1, TMaxWindow+MaxWindow-1, false).
		allow(1, 1, TMaxWindow+MaxWindow, true)
	s.add("limit-max", win(MaxCount, 1000)).
		allow(1, MaxCount, T, true).allow(1, 1, T+999, false).probe(cnt, 1, T+999, MaxCount).
		allow(1, MaxCount, T+1000, true)
	s.add("limit-max-cost-above-limit-refused", win(MaxCount, 1000)).
		allow(1, MaxCount+1, T, false).size(1).allow(1, MaxCount, T, true)
	s.add("times-cross-2^31-ms", win(2, 1000)).
		allow(1, 2, 1<<31-1, true). // window 2,147,483,000
		allow(1, 1, 1<<31, false).  // 2,147,483,648: the same window
		retry(1, 1<<31, 352).       // 2,147,484,000 - 2,147,483,648
		allow(1, 1, 2_147_484_000, true)
	s.walk("random-walk-limit-3-window-1000", p, 121, walkSpec{keys: 2, start: T, maxDt: 120, jumpDt: 3000, maxCost: 2, steps: 80})
	s.walk("random-walk-limit-4-window-7", win(4, 7), 122, walkSpec{keys: 2, start: T, maxDt: 1, jumpDt: 30, maxCost: 3, steps: 80})
	s.walk("random-walk-limit-max-window-max", win(MaxCount, MaxWindow), 123, walkSpec{keys: 2, start: TMaxWindow, maxDt: 1 << 28, jumpDt: 1 << 32, maxCost: MaxCount, steps: 60})
	s.honourWalk("retryAfter-honoured-limit-3-window-1000", p, 221, T, 300)
	s.honourWalk("retryAfter-honoured-limit-2-window-30-days", win(2, Month), 222, TMonth, Month/3)
}
