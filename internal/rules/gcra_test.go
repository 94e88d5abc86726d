package rules

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/policy"
)

func runGCRASteps(t *testing.T, p GCRA, t0 int64, steps []bucketStep) {
	t.Helper()
	s := p.Fresh(t0)
	for i, st := range steps {
		if st.peek {
			r, pr := p.Peek(s, st.now)
			if r != st.want || pr.Tokens != st.probe {
				t.Fatalf("step %d peek at %d: %+v tokens %d, want %+v tokens %d", i, st.now, r, pr.Tokens, st.want, st.probe)
			}
			continue
		}
		if r := p.Take(&s, st.now, st.cost); r != st.want {
			t.Fatalf("step %d take(%d) at %d: %+v, want %+v", i, st.cost, st.now, r, st.want)
		}
	}
}

func TestGCRASteps(t *testing.T) {
	t.Run("rate10-burst3", func(t *testing.T) {
		// Scaled time: 1 ms = 10 units, 1 permit = 1000. Fresh at 1000: TAT = s = 10000.
		// Admit iff s >= TAT - (3 - cost)*1000. The expectations are the token bucket's with the same
		// rate and burst, step for step (TestTokenBucketSteps/rate10-burst3).
		steps := []bucketStep{
			// target 10000-2000 <= 10000: TAT 11000; tokens (10000-(11000-3000))/1000 = 2; reset ceil(11000/10).
			{now: 1000, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAtMs: 1100}},
			// target 11000-1000 = 10000 <= 10000: TAT 13000, 0 left, reset 1300.
			{now: 1000, cost: 2, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 1300}},
			// target 13000-2000 = 11000 > 10000: wait ceil(11000/10) - 1000 = 100.
			{now: 1000, cost: 1, want: policy.Result{Limit: 3, RetryAfterMs: 100, ResetAtMs: 1300}},
			// s 10500: wait 1100-1050 = 50; tokens (10500-10000)/1000 = 0.
			{now: 1050, peek: true, want: policy.Result{Limit: 3, RetryAfterMs: 50, ResetAtMs: 1300}},
			// s 10990 < 11000: 1 ms.
			{now: 1099, cost: 1, want: policy.Result{Limit: 3, RetryAfterMs: 1, ResetAtMs: 1300}},
			// s 11000 = target: TAT max(11000, 13000)+1000 = 14000; tokens (11000-11000)/1000 = 0.
			{now: 1100, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 1400}},
			// 4 > burst: refused before anything, wait 0.
			{now: 1100, cost: 4, want: policy.Result{Limit: 3, ResetAtMs: 1400}},
			// cost 0: target 14000-3000 = 11000 <= 11000, TAT unchanged.
			{now: 1100, cost: 0, want: policy.Result{Allowed: true, Limit: 3, ResetAtMs: 1400}},
			// s 11500, target 14000-1000 = 13000: wait 1300-1150 = 150.
			{now: 1150, cost: 2, want: policy.Result{Limit: 3, RetryAfterMs: 150, ResetAtMs: 1400}},
			// s 50000 far past TAT: tokens min(3, (50000-11000)/1000) = 3; reset is now.
			{now: 5000, peek: true, want: policy.Result{Allowed: true, Limit: 3, Remaining: 3, ResetAtMs: 5000}, probe: 3},
		}
		runGCRASteps(t, GCRA{Rate: 10, Burst: 3}, 1000, steps)
		runTokenSteps(t, TokenBucket{Rate: 10, Burst: 3}, 1000, steps)
	})
	t.Run("rate-max-at-2^40", func(t *testing.T) {
		// Rate L = 2^32-1, burst 2, at 2^40 ms: s = 2^40*L is about 2^72, beyond int64; the lag
		// TAT - s stays small. Fresh: lag 0.
		const t0 = 1 << 40
		steps := []bucketStep{
			// lag 0 <= (2-2)*1000: admitted, lag 2000; tokens (2000-2000)/1000 = 0; full after ceil(2000/L) = 1 ms.
			{now: t0, cost: 2, want: policy.Result{Allowed: true, Limit: 2, ResetAtMs: t0 + 1}},
			// lag 2000 > (2-1)*1000: wait ceil((2000-1000)/L) = 1.
			{now: t0, cost: 1, want: policy.Result{Limit: 2, RetryAfterMs: 1, ResetAtMs: t0 + 1}},
			{now: t0, peek: true, want: policy.Result{Limit: 2, RetryAfterMs: 1, ResetAtMs: t0 + 1}, probe: 0},
			// 1 ms: lag 2000 - L < 0, full: admitted, lag 1000; tokens (2000-1000)/1000 = 1.
			{now: t0 + 1, cost: 1, want: policy.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAtMs: t0 + 2}},
		}
		runGCRASteps(t, GCRA{Rate: policy.MaxLimit, Burst: 2}, t0, steps)
		runTokenSteps(t, TokenBucket{Rate: policy.MaxLimit, Burst: 2}, t0, steps)
	})
	t.Run("rate-max-burst-max-at-2^62", func(t *testing.T) {
		// L = 2^32-1 for both, at 2^62 ms: s is about 2^94.
		const t0 = 1 << 62
		steps := []bucketStep{
			// lag 0 <= 0: admitted, lag 1000L; full after ceil(1000L/L) = 1000 ms.
			{now: t0, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + 1000}},
			// lag 1000L > (L-1)*1000: wait ceil(1000/L) = 1.
			{now: t0, cost: 1, want: policy.Result{Limit: policy.MaxLimit, RetryAfterMs: 1, ResetAtMs: t0 + 1000}},
			// 1 ms: lag 999L; tokens (1000L - 999L)/1000 = L/1000 = 4294967; full after ceil(999L/L).
			{now: t0 + 1, peek: true, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, Remaining: 4294967, ResetAtMs: t0 + 1000}, probe: 4294967},
		}
		runGCRASteps(t, GCRA{Rate: policy.MaxLimit, Burst: policy.MaxLimit}, t0, steps)
		runTokenSteps(t, TokenBucket{Rate: policy.MaxLimit, Burst: policy.MaxLimit}, t0, steps)
	})
	t.Run("rate-2^20-burst-max", func(t *testing.T) {
		// Rate R = 2^20, burst MaxLimit. Burst*1000 = 4294967295000 = 4096000*R - 1000, so a full
		// refill takes ceil(Burst*1000/R) = 4096000 ms.
		const t0 = 1<<42 - 2000
		const fill = 4096000
		steps := []bucketStep{
			{now: t0, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + fill}},
			// lag Burst*1000, room (Burst-1)*1000: wait ceil(1000/R) = 1.
			{now: t0, cost: 1, want: policy.Result{Limit: policy.MaxLimit, RetryAfterMs: 1, ResetAtMs: t0 + fill}},
			// 1 ms: R = 1048576 thousandths = 1048 permits.
			{now: t0 + 1, peek: true, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, Remaining: 1048, ResetAtMs: t0 + fill}, probe: 1048},
			// 1999 ms: 1999*R = 2096103424 thousandths = 2096103 permits; a whole burst needs
			// ceil((Burst*1000 - 2096103424)/R) = fill - 1999 ms more.
			{now: t0 + 1999, cost: policy.MaxLimit, want: policy.Result{Limit: policy.MaxLimit, Remaining: 2096103, RetryAfterMs: fill - 1999, ResetAtMs: t0 + fill}},
		}
		runGCRASteps(t, GCRA{Rate: 1 << 20, Burst: policy.MaxLimit}, t0, steps)
		runTokenSteps(t, TokenBucket{Rate: 1 << 20, Burst: policy.MaxLimit}, t0, steps)
	})
}

// TestGCRAMaxIdle pins the documented limit of the 64-bit state: exact up to MaxIdleMs after the
// last admission, and misjudged once the scaled clock has wrapped, which is why the engine must
// forget or refresh a state (Dead long before) within MaxIdleMs.
func TestGCRAMaxIdle(t *testing.T) {
	p := GCRA{Rate: 1 << 31, Burst: 1}
	if got, want := p.MaxIdleMs(), int64(1<<32-1); got != want { // floor((2^63-1) / 2^31)
		t.Fatalf("MaxIdleMs = %d, want %d", got, want)
	}
	if got, want := (GCRA{Rate: 1 << 20, Burst: 1}).MaxIdleMs(), int64(1<<43-1); got != want {
		t.Fatalf("MaxIdleMs at 2^20/s = %d, want %d", got, want)
	}
	const t0 = 1 << 41
	s := p.Fresh(t0)
	p.Take(&s, t0, 1) // lag 1000
	if !p.Dead(s, t0+1) {
		t.Fatal("full again 1 ms later (2^31 units per ms): dead")
	}
	at := t0 + p.MaxIdleMs() // lag = 1000 - (2^32-1)*2^31 >= -2^63: exact, full
	if c := s; !p.Take(&c, at, 1).Allowed {
		t.Fatal("refused at MaxIdleMs, where the state is still exact")
	}
	// 2^33 ms later the scaled clock has advanced 2^64 units: the lag wraps back to 1000.
	if c := s; p.Take(&c, t0+1<<33, 1).Allowed || p.Dead(s, t0+1<<33) {
		t.Fatal("expected the documented misjudgment past MaxIdleMs; update the documentation")
	}
}

func TestGCRADead(t *testing.T) {
	p := GCRA{Rate: 10, Burst: 3}
	s := p.Fresh(1000)
	if !p.Dead(s, 1000) || !p.Dead(s, 1<<41) {
		t.Fatal("a full bucket is dead")
	}
	p.Take(&s, 1000, 1) // TAT 11000: full again at 1100
	if p.Dead(s, 1000) || p.Dead(s, 1099) {
		t.Fatal("a bucket short of a permit is not dead")
	}
	if !p.Dead(s, 1100) {
		t.Fatal("TAT 11000 <= 1100*10: dead")
	}
}

// gcraRange draws a GCRA configuration over the whole range, a start time (up to 2^62 ms, where
// scaled time is near 2^94) and the latest clock reading the tests use. Idle gaps stay far below
// MaxIdleMs: the drawn gaps are at most a few fill times, and fill*Rate < Burst*1000 + Rate.
func gcraRange(t *rapid.T) (GCRA, int64, int64) {
	p := GCRA{Rate: drawRate(t, "rate", policy.MaxLimit), Burst: drawRate(t, "burst", policy.MaxLimit)}
	t0 := drawStart(t)
	if rapid.Bool().Draw(t, "near 2^62") {
		t0 = rapid.Int64Range(1<<62-1<<20, 1<<62).Draw(t, "t0")
	}
	return p, t0, 1<<62 + 1<<60
}

// TestGCRAEqualsTokenBucket: with the same rate and burst, GCRA and the token bucket give the
// same Result, the same tokens and the same Dead on every request sequence (non-decreasing times).
func TestGCRAEqualsTokenBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g, t0, maxNow := gcraRange(t)
		tb := TokenBucket(g)
		gs, ts := g.Fresh(t0), tb.Fresh(t0)
		now := t0
		for i, op := range drawOps(t, tb.FillMs(), g.Burst, 60) {
			now = min(now+op.dt, maxNow)
			if dg, dt := g.Dead(gs, now), tb.Dead(ts, now); dg != dt {
				t.Fatalf("op %d at %d: GCRA dead %v, token bucket dead %v", i, now, dg, dt)
			}
			if op.peek {
				rg, pg := g.Peek(gs, now)
				rt, pt := tb.Peek(ts, now)
				if rg != rt || pg != pt {
					t.Fatalf("op %d peek at %d: GCRA %+v %+v, token bucket %+v %+v", i, now, rg, pg, rt, pt)
				}
				continue
			}
			rg := g.Take(&gs, now, op.cost)
			if rt := tb.Take(&ts, now, op.cost); rg != rt {
				t.Fatalf("op %d take(%d) at %d: GCRA %+v, token bucket %+v", i, op.cost, now, rg, rt)
			}
		}
	})
}

func TestGCRAProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p, t0, maxNow := gcraRange(t)
		fill := divCeil(p.Burst*1000, p.Rate)
		st := stepper[GCRAState]{
			fresh: p.Fresh, take: p.Take, peek: p.Peek, dead: p.Dead,
			maxCost: p.Burst, tightReset: true,
			atRest: func(pr policy.Probe) bool { return pr.Tokens == p.Burst },
		}
		st.run(t, newRefTokens(p.Rate, p.Burst, t0), t0, maxNow, drawOps(t, fill, p.Burst, 40))
	})
}
