package rules

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/policy"
)

func runLogSteps(t *testing.T, p SlidingLog, s SlidingLogState, steps []countStep) {
	t.Helper()
	for i, st := range steps {
		if st.peek {
			r, pr := p.Peek(s, st.now)
			if r != st.want || pr.Count != st.count {
				t.Fatalf("step %d peek at %d: %+v count %d, want %+v count %d", i, st.now, r, pr.Count, st.want, st.count)
			}
			continue
		}
		if r := p.Take(&s, st.now, st.cost); r != st.want {
			t.Fatalf("step %d take(%d) at %d: %+v, want %+v", i, st.cost, st.now, r, st.want)
		}
	}
}

func TestSlidingLogSteps(t *testing.T) {
	t.Run("limit3-1s", func(t *testing.T) {
		// The window at now is (now-1000, now]. ResetAtMs = newest + 1000 (now when empty).
		p := SlidingLog{Limit: 3, Window: time.Second}
		runLogSteps(t, p, p.Fresh(10000), []countStep{
			{now: 10000, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAtMs: 11000}},
			{now: 10400, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 1, ResetAtMs: 11400}},
			// log [10000 10400]: 2+2 > 3 needs 1 entry gone: 10000 + 1000 - 10500 = 500.
			{now: 10500, cost: 2, want: policy.Result{Limit: 3, Remaining: 1, RetryAfterMs: 500, ResetAtMs: 11400}},
			{now: 10500, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 11500}},
			// full: the oldest leaves at 10000 + 1000 = 11000, no extra millisecond: 1 ms.
			{now: 10999, peek: true, want: policy.Result{Limit: 3, RetryAfterMs: 1, ResetAtMs: 11500}, count: 3},
			// 10000 <= 11000 - 1000 leaves: [10400 10500 11000].
			{now: 11000, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 12000}},
			// cost 3 needs all 3 gone: the 3rd oldest, 11000 + 1000 - 11000 = 1000.
			{now: 11000, cost: 3, want: policy.Result{Limit: 3, RetryAfterMs: 1000, ResetAtMs: 12000}},
			{now: 11000, cost: 4, want: policy.Result{Limit: 3, ResetAtMs: 12000}},
			{now: 11000, cost: 0, want: policy.Result{Allowed: true, Limit: 3, ResetAtMs: 12000}},
			// 10400 leaves: [10500 11000]; cost 2 needs 1 gone: 10500 + 1000 - 11400 = 100.
			{now: 11400, cost: 2, want: policy.Result{Limit: 3, Remaining: 1, RetryAfterMs: 100, ResetAtMs: 12000}},
			{now: 20000, peek: true, want: policy.Result{Allowed: true, Limit: 3, Remaining: 3, ResetAtMs: 20000}, count: 0},
			// 3 copies of 20000; all leave together at 21000.
			{now: 20000, cost: 3, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 21000}},
			{now: 20999, cost: 1, want: policy.Result{Limit: 3, RetryAfterMs: 1, ResetAtMs: 21000}},
			{now: 21000, cost: 3, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 22000}},
		})
	})
	t.Run("extremes", func(t *testing.T) {
		// Limit 10000, window 2^32 ms, from 2^41 + 5: entries 2^32 - 1 ms apart, the widest span the
		// 32-bit entries hold; their low bits wrap (uint32(t0 + 2^32 - 1) = uint32(t0) - 1).
		const t0 = 1<<41 + 5
		const w = 1 << 32
		p := SlidingLog{Limit: policy.MaxLogLimit, Window: policy.MaxWindow}
		runLogSteps(t, p, p.Fresh(t0), []countStep{
			{now: t0, cost: 1, want: policy.Result{Allowed: true, Limit: policy.MaxLogLimit, Remaining: 9999, ResetAtMs: t0 + w}},
			// t0 > (t0 + w - 1) - w: still in the window. 1 + 9998 = 9999.
			{now: t0 + w - 1, cost: 9998, want: policy.Result{Allowed: true, Limit: policy.MaxLogLimit, Remaining: 1, ResetAtMs: t0 + 2*w - 1}},
			// 9999 + 2 > 10000: t0 must leave, at t0 + w: 1 ms.
			{now: t0 + w - 1, cost: 2, want: policy.Result{Limit: policy.MaxLogLimit, Remaining: 1, RetryAfterMs: 1, ResetAtMs: t0 + 2*w - 1}},
			{now: t0 + w, cost: 2, want: policy.Result{Allowed: true, Limit: policy.MaxLogLimit, Remaining: 0, ResetAtMs: t0 + 2*w}},
			// the 9998 at t0 + w - 1 leave at t0 + 2w - 1.
			{now: t0 + 2*w - 2, peek: true, want: policy.Result{Limit: policy.MaxLogLimit, RetryAfterMs: 1, ResetAtMs: t0 + 2*w}, count: policy.MaxLogLimit},
			{now: t0 + 2*w - 1, peek: true, want: policy.Result{Allowed: true, Limit: policy.MaxLogLimit, Remaining: 9998, ResetAtMs: t0 + 2*w}, count: 2},
		})
	})
	t.Run("zero-state", func(t *testing.T) {
		// The zero state is an empty log; its ring is allocated on the first admission.
		p := SlidingLog{Limit: 2, Window: time.Second}
		runLogSteps(t, p, SlidingLogState{}, []countStep{
			{now: 5000, peek: true, want: policy.Result{Allowed: true, Limit: 2, Remaining: 2, ResetAtMs: 5000}},
			{now: 5000, cost: 3, want: policy.Result{Limit: 2, Remaining: 2, ResetAtMs: 5000}},
			{now: 5000, cost: 2, want: policy.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAtMs: 6000}},
			{now: 5001, cost: 1, want: policy.Result{Limit: 2, RetryAfterMs: 999, ResetAtMs: 6000}},
		})
	})
	t.Run("time-runs-back", func(t *testing.T) {
		// A take at an earlier now than the newest entry records the newest entry's time.
		p := SlidingLog{Limit: 2, Window: time.Second}
		runLogSteps(t, p, p.Fresh(5000), []countStep{
			{now: 5000, cost: 1, want: policy.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAtMs: 6000}},
			{now: 4990, cost: 1, want: policy.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAtMs: 6000}},
			// both entries are at 5000 and leave together at 6000.
			{now: 5999, cost: 2, want: policy.Result{Limit: 2, RetryAfterMs: 1, ResetAtMs: 6000}},
			{now: 6000, cost: 2, want: policy.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAtMs: 7000}},
		})
	})
}

func TestSlidingLogPeekReadsOnly(t *testing.T) {
	p := SlidingLog{Limit: 4, Window: time.Second}
	s := p.Fresh(0)
	for _, now := range []int64{0, 100, 200, 300} {
		p.Take(&s, now, 1)
	}
	before := s.Clone()
	sinkResult, sinkProbe = p.Peek(s, 1250) // would expire three entries
	sinkDead = p.Dead(s, 5000)              // would expire all
	if s.head != before.head || s.count != before.count || s.base != before.base || !slices.Equal(s.ring, before.ring) {
		t.Fatalf("Peek or Dead changed the state: %+v, was %+v", s, before)
	}
}

func TestSlidingLogDead(t *testing.T) {
	p := SlidingLog{Limit: 3, Window: time.Second}
	s := p.Fresh(0)
	if !p.Dead(s, 0) || !p.Dead(SlidingLogState{}, 0) {
		t.Fatal("an empty log is dead")
	}
	p.Take(&s, 1000, 1)
	if p.Dead(s, 999) || p.Dead(s, 1999) {
		t.Fatal("an entry in the window (or after now) is not dead")
	}
	if !p.Dead(s, 2000) {
		t.Fatal("1000 <= 2000 - 1000 has left: dead")
	}
}

// refLog is the literal log of docs/policies.md, with full int64 timestamps.
type refLog struct {
	limit, w int64
	times    []int64
}

func (r *refLog) expire(now int64) {
	r.times = slices.DeleteFunc(r.times, func(t int64) bool { return t <= now-r.w })
}

func (r *refLog) take(now, cost int64) (bool, int64) {
	r.expire(now)
	n := int64(len(r.times))
	ok := cost <= r.limit && n+cost <= r.limit
	if ok {
		for range cost {
			r.times = append(r.times, now)
		}
	}
	return ok, r.limit - int64(len(r.times))
}

func (r *refLog) probe(now int64) policy.Probe {
	r.expire(now)
	return policy.Probe{Count: int64(len(r.times))}
}

func drawLogParams(t *rapid.T) (SlidingLog, int64) {
	w := drawWindowMs(t)
	limit := rapid.OneOf(
		rapid.Int64Range(1, 5),
		rapid.Int64Range(1, 50),
		rapid.Just(int64(policy.MaxLogLimit)),
	).Draw(t, "limit")
	return SlidingLog{Limit: limit, Window: time.Duration(w) * time.Millisecond}, w
}

func TestSlidingLogProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p, w := drawLogParams(t)
		t0 := drawStart(t)
		st := stepper[SlidingLogState]{
			fresh: p.Fresh, take: p.Take, peek: p.Peek, dead: p.Dead,
			clone:   SlidingLogState.Clone,
			maxCost: p.Limit, tightReset: true,
			atRest: func(pr policy.Probe) bool { return pr.Count == 0 },
		}
		st.run(t, &refLog{limit: p.Limit, w: w}, t0, 1<<62, drawOps(t, w, p.Limit, 30))
	})
}

// TestSlidingLogAnyWindow: checked against the admitted requests alone, with no model, the log
// admits at most Limit units in any window-long span (now - Window, now], and refuses a request
// only when admitting it would break that.
func TestSlidingLogAnyWindow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 8).Draw(t, "limit")
		w := rapid.Int64Range(1, 50).Draw(t, "windowMs")
		p := SlidingLog{Limit: limit, Window: time.Duration(w) * time.Millisecond}
		now := drawStart(t)
		s := p.Fresh(now)
		type admit struct{ at, cost int64 }
		var admitted []admit
		inWindow := func(end int64) (n int64) {
			for _, a := range admitted {
				if a.at > end-w && a.at <= end {
					n += a.cost
				}
			}
			return n
		}
		for range rapid.IntRange(1, 200).Draw(t, "n") {
			now += rapid.Int64Range(0, w/2+1).Draw(t, "dt")
			cost := rapid.Int64Range(0, limit).Draw(t, "cost")
			r := p.Take(&s, now, cost)
			if !r.Allowed {
				if n := inWindow(now); n+cost <= limit {
					t.Fatalf("refused cost %d at %d with only %d in the window", cost, now, n)
				}
				continue
			}
			admitted = append(admitted, admit{now, cost})
			if n := inWindow(now); n > limit {
				t.Fatalf("%d units in the window ending %d, limit %d", n, now, limit)
			}
		}
	})
}

func TestSlidingLogStateBytes(t *testing.T) {
	if got, want := (SlidingLog{Limit: 5}).StateBytes(), int64(40+4*5); got != want {
		t.Fatalf("StateBytes = %d, want %d", got, want)
	}
}
