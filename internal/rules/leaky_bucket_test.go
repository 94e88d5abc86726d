package rules

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/policy"
)

func runLeakySteps(t *testing.T, p LeakyBucket, t0 int64, steps []bucketStep) {
	t.Helper()
	s := p.Fresh(t0)
	for i, st := range steps {
		if st.peek {
			r, pr := p.Peek(s, st.now)
			if r != st.want || pr.Level != st.probe {
				t.Fatalf("step %d peek at %d: %+v level %d, want %+v level %d", i, st.now, r, pr.Level, st.want, st.probe)
			}
			continue
		}
		if r := p.Take(&s, st.now, st.cost); r != st.want {
			t.Fatalf("step %d take(%d) at %d: %+v, want %+v", i, st.cost, st.now, r, st.want)
		}
	}
}

func TestLeakyBucketSteps(t *testing.T) {
	t.Run("rate10-capacity3", func(t *testing.T) {
		// drainMs = ceil(3*1000/10) = 300. Fresh at 1000 = {level 0, credit 0, last 1000}.
		runLeakySteps(t, LeakyBucket{Rate: 10, Capacity: 3}, 1000, []bucketStep{
			// level 1, room 2; empty again after 1000/10 = 100 ms.
			{now: 1000, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAtMs: 1100}},
			// level 3; empty after 3000/10 = 300 ms.
			{now: 1000, cost: 2, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 1300}},
			// full: one unit drains in ceil((1000-0)/10) = 100 ms.
			{now: 1000, cost: 1, want: policy.Result{Limit: 3, RetryAfterMs: 100, ResetAtMs: 1300}},
			// 50 ms: credit 500, drained 0, level 3: ceil(500/10) = 50; empty at 1050 + ceil(2500/10).
			{now: 1050, peek: true, want: policy.Result{Limit: 3, RetryAfterMs: 50, ResetAtMs: 1300}, probe: 3},
			// 99 ms: credit 990: 1 ms; empty at 1099 + ceil(2010/10) = 1099 + 201.
			{now: 1099, cost: 1, want: policy.Result{Limit: 3, RetryAfterMs: 1, ResetAtMs: 1300}},
			// credit 1000 -> drained 1, level 2, credit 0; admitted -> 3; empty at 1100 + 300.
			{now: 1100, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 1400}},
			// 4 > capacity: never admissible.
			{now: 1100, cost: 4, want: policy.Result{Limit: 3, ResetAtMs: 1400}},
			{now: 1100, cost: 0, want: policy.Result{Allowed: true, Limit: 3, ResetAtMs: 1400}},
			// 50 ms: credit 500; cost 2 needs (3+2-3)*1000-500 = 1500 thousandths drained: 150 ms.
			{now: 1150, cost: 2, want: policy.Result{Limit: 3, RetryAfterMs: 150, ResetAtMs: 1400}},
			// idle: dt clamped to 300, credit 3500, drained 3 >= 3 -> empty, credit 0.
			{now: 5000, peek: true, want: policy.Result{Allowed: true, Limit: 3, Remaining: 3, ResetAtMs: 5000}, probe: 0},
		})
	})
	t.Run("rate3-capacity2", func(t *testing.T) {
		// drainMs = ceil(2000/3) = 667.
		runLeakySteps(t, LeakyBucket{Rate: 3, Capacity: 2}, 0, []bucketStep{
			{now: 0, cost: 2, want: policy.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAtMs: 667}},
			// credit 999, nothing drained yet: ceil(1/3) = 1 ms; empty at 333 + ceil(1001/3) = 333 + 334.
			{now: 333, cost: 1, want: policy.Result{Limit: 2, RetryAfterMs: 1, ResetAtMs: 667}},
			// credit 1002 -> drained 1, credit 2, level 1; admitted -> 2; water 1998: 666 ms.
			{now: 334, cost: 1, want: policy.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAtMs: 1000}},
			// 666 ms: credit 2 + 1998 = 2000 -> drained 2 = level: empty exactly.
			{now: 1000, peek: true, want: policy.Result{Allowed: true, Limit: 2, Remaining: 2, ResetAtMs: 1000}, probe: 0},
			// (the peek changed nothing) 665 ms: credit 1997 -> drained 1, level 1, credit 997;
			// admitted -> 2; water 2000-997 = 1003: ceil(1003/3) = 335 ms.
			{now: 999, cost: 1, want: policy.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAtMs: 1334}},
		})
	})
	t.Run("extremes", func(t *testing.T) {
		// Rate = Capacity = MaxLimit at 2^41: drainMs = 1000.
		const t0 = 1 << 41
		runLeakySteps(t, LeakyBucket{Rate: policy.MaxLimit, Capacity: policy.MaxLimit}, t0, []bucketStep{
			{now: t0, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + 1000}},
			{now: t0, cost: 1, want: policy.Result{Limit: policy.MaxLimit, RetryAfterMs: 1, ResetAtMs: t0 + 1000}},
			// 1 ms: credit MaxLimit -> drained 4294967, credit 295, level 4290672328; water
			// 4290672328*1000-295 = 999*MaxLimit: empty at t0+1+999.
			{now: t0 + 1, peek: true, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, Remaining: 4294967, ResetAtMs: t0 + 1000}, probe: 4290672328},
			// 500 ms: credit 500*MaxLimit -> drained 2147483647, credit 500, level 2147483648;
			// room for MaxLimit needs 2147483648*1000-500 = 500*MaxLimit drained: 500 ms.
			{now: t0 + 500, cost: policy.MaxLimit, want: policy.Result{Limit: policy.MaxLimit, Remaining: 2147483647, RetryAfterMs: 500, ResetAtMs: t0 + 1000}},
			// 500 ms more: credit 500 + 500*MaxLimit = 2147483648000 -> drained = level: empty.
			{now: t0 + 1000, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + 2000}},
		})
	})
}

func TestLeakyBucketDead(t *testing.T) {
	p := LeakyBucket{Rate: 10, Capacity: 3}
	s := p.Fresh(1000)
	if !p.Dead(s, 1000) || !p.Dead(s, 1<<41) {
		t.Fatal("an empty bucket is dead")
	}
	if p.Dead(s, 999) {
		t.Fatal("a state stamped after now is not dead: its drain starts later than a fresh key's")
	}
	p.Take(&s, 1000, 1) // level 1: empty again after 100 ms
	if p.Dead(s, 1099) {
		t.Fatal("a bucket holding a unit is not dead")
	}
	if !p.Dead(s, 1100) {
		t.Fatal("drained empty at 1100: dead")
	}
}

// refLeaky is the leaky bucket as its water in thousandths of a unit, falling by rate per ms
// to 0; the level is the water rounded up to whole units.
type refLeaky struct {
	rate, capacity int64
	water, last    int64
}

func (r *refLeaky) advance(now int64) {
	if now > r.last {
		r.water = subFloored(r.water, r.rate, now-r.last)
		r.last = now
	}
}

func (r *refLeaky) level() int64 { return divCeil(r.water, 1000) }

func (r *refLeaky) take(now, cost int64) (bool, int64) {
	r.advance(now)
	ok := cost <= r.capacity && r.level()+cost <= r.capacity
	if ok {
		r.water += cost * 1000
	}
	return ok, r.capacity - r.level()
}

func (r *refLeaky) probe(now int64) policy.Probe {
	r.advance(now)
	return policy.Probe{Level: r.level()}
}

func TestLeakyBucketProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := LeakyBucket{Rate: drawRate(t, "rate", policy.MaxLimit), Capacity: drawRate(t, "capacity", policy.MaxLimit)}
		t0 := drawStart(t)
		st := stepper[LeakyBucketState]{
			fresh: p.Fresh, take: p.Take, peek: p.Peek, dead: p.Dead,
			maxCost: p.Capacity, tightReset: true,
			atRest: func(pr policy.Probe) bool { return pr.Level == 0 },
		}
		st.run(t, &refLeaky{rate: p.Rate, capacity: p.Capacity, last: t0}, t0, 1<<62, drawOps(t, p.DrainMs(), p.Capacity, 40))
	})
}
