package rules

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/policy"
)

type bucketStep struct {
	now, cost int64
	peek      bool
	want      policy.Result
	probe     int64 // Peek only: the probe (tokens, level, requests…)
}

func runTokenSteps(t *testing.T, p TokenBucket, t0 int64, steps []bucketStep) {
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

func TestTokenBucketSteps(t *testing.T) {
	t.Run("rate10-burst3", func(t *testing.T) {
		// fillMs = ceil(3*1000/10) = 300. Fresh at 1000 = {3 tokens, credit 0, last 1000}.
		runTokenSteps(t, TokenBucket{Rate: 10, Burst: 3}, 1000, []bucketStep{
			// 3-1 = 2 left; full again after (3-2)*1000/10 = 100 ms.
			{now: 1000, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAtMs: 1100}},
			// 2-2 = 0; full after 3000/10 = 300 ms.
			{now: 1000, cost: 2, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 1300}},
			// empty: the next token after ceil((1000-0)/10) = 100 ms.
			{now: 1000, cost: 1, want: policy.Result{Limit: 3, RetryAfterMs: 100, ResetAtMs: 1300}},
			// 50 ms: credit 10*50 = 500, still 0 tokens; wait ceil(500/10) = 50; full at 1050 + ceil(2500/10).
			{now: 1050, peek: true, want: policy.Result{Limit: 3, RetryAfterMs: 50, ResetAtMs: 1300}},
			// 99 ms: credit 990; wait ceil(10/10) = 1; full at 1099 + ceil(2010/10) = 1099 + 201.
			{now: 1099, cost: 1, want: policy.Result{Limit: 3, RetryAfterMs: 1, ResetAtMs: 1300}},
			// 1 ms more: credit 1000 -> 1 token, credit 0; taken; full at 1100 + 300.
			{now: 1100, cost: 1, want: policy.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAtMs: 1400}},
			// cost 4 > burst 3: never admissible, RetryAfterMs 0.
			{now: 1100, cost: 4, want: policy.Result{Limit: 3, ResetAtMs: 1400}},
			// cost 0: admitted even with no token.
			{now: 1100, cost: 0, want: policy.Result{Allowed: true, Limit: 3, ResetAtMs: 1400}},
			// 50 ms: credit 500; cost 2 needs 2000-500 = 1500 thousandths: ceil(1500/10) = 150 ms.
			{now: 1150, cost: 2, want: policy.Result{Limit: 3, RetryAfterMs: 150, ResetAtMs: 1400}},
			// idle: dt clamped to 300, credit 500+3000 -> 3 tokens -> saturated at burst, credit 0.
			{now: 5000, peek: true, want: policy.Result{Allowed: true, Limit: 3, Remaining: 3, ResetAtMs: 5000}, probe: 3},
		})
	})
	t.Run("rate3-burst2", func(t *testing.T) {
		// A rate that does not divide 1000: fillMs = ceil(2000/3) = 667.
		runTokenSteps(t, TokenBucket{Rate: 3, Burst: 2}, 0, []bucketStep{
			{now: 0, cost: 2, want: policy.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAtMs: 667}},
			// next token after ceil(1000/3) = 334 ms.
			{now: 0, peek: true, want: policy.Result{Limit: 2, RetryAfterMs: 334, ResetAtMs: 667}},
			// 333 ms: credit 999, 0 tokens: ceil(1/3) = 1 ms more; full at 333 + ceil(1001/3) = 333 + 334.
			{now: 333, cost: 1, want: policy.Result{Limit: 2, RetryAfterMs: 1, ResetAtMs: 667}},
			// 334: credit 1002 -> 1 token, credit 2; taken; full at 334 + ceil(1998/3) = 334 + 666.
			{now: 334, cost: 1, want: policy.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAtMs: 1000}},
			// 667: credit 2 + 3*333 = 1001 -> 1 token, credit 1; full at 667 + ceil(999/3) = 667 + 333.
			{now: 667, peek: true, want: policy.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAtMs: 1000}, probe: 1},
			// 1000: credit 2 + 3*666 = 2000 -> 2 tokens, full.
			{now: 1000, peek: true, want: policy.Result{Allowed: true, Limit: 2, Remaining: 2, ResetAtMs: 1000}, probe: 2},
		})
	})
	t.Run("extremes-max-rate", func(t *testing.T) {
		// Rate = Burst = MaxLimit = 4294967295 at 2^41: fillMs = ceil(MaxLimit*1000/MaxLimit) = 1000.
		const t0 = 1 << 41
		runTokenSteps(t, TokenBucket{Rate: policy.MaxLimit, Burst: policy.MaxLimit}, t0, []bucketStep{
			{now: t0, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + 1000}},
			// ceil(1000 / MaxLimit) = 1 ms.
			{now: t0, cost: 1, want: policy.Result{Limit: policy.MaxLimit, RetryAfterMs: 1, ResetAtMs: t0 + 1000}},
			// 1 ms: credit MaxLimit -> 4294967 tokens, credit 295; deficit (MaxLimit-4294967)*1000-295 =
			// 4290672327705 = 999*MaxLimit exactly, so full at t0+1+999.
			{now: t0 + 1, peek: true, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, Remaining: 4294967, ResetAtMs: t0 + 1000}, probe: 4294967},
			// 500 ms: credit 500*MaxLimit = 2147483647500 -> 2147483647 tokens, credit 500; the
			// missing 2147483648*1000-500 = 500*MaxLimit thousandths take exactly 500 ms.
			{now: t0 + 500, cost: policy.MaxLimit, want: policy.Result{Limit: policy.MaxLimit, Remaining: 2147483647, RetryAfterMs: 500, ResetAtMs: t0 + 1000}},
			{now: t0 + 1000, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + 2000}},
		})
	})
	t.Run("extremes-slow", func(t *testing.T) {
		// Rate 1, Burst MaxLimit: fillMs = MaxLimit*1000 = 4294967295000 (about 136 years).
		const t0 = 1 << 41
		const fill = policy.MaxLimit * 1000
		runTokenSteps(t, TokenBucket{Rate: 1, Burst: policy.MaxLimit}, t0, []bucketStep{
			{now: t0, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + fill}},
			// 1 ms: credit 1; MaxLimit tokens need fill-1 more thousandths at 1 per ms.
			{now: t0 + 1, cost: policy.MaxLimit, want: policy.Result{Limit: policy.MaxLimit, RetryAfterMs: fill - 1, ResetAtMs: t0 + fill}},
			{now: t0 + fill, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + 2*fill}},
		})
	})
}

func TestTokenBucketDead(t *testing.T) {
	p := TokenBucket{Rate: 10, Burst: 3}
	s := p.Fresh(1000)
	if !p.Dead(s, 1000) || !p.Dead(s, 5000) {
		t.Fatal("a full bucket is dead")
	}
	if p.Dead(s, 999) {
		t.Fatal("a state stamped after now is not dead: its refill starts later than a fresh key's")
	}
	p.Take(&s, 1000, 1) // 2 tokens: full again after 100 ms
	if p.Dead(s, 1000) || p.Dead(s, 1099) {
		t.Fatal("a bucket short of a token is not dead")
	}
	if !p.Dead(s, 1100) {
		t.Fatal("refilled to full at 1100: dead")
	}
}

func drawRate(t *rapid.T, label string, hi int64) int64 {
	return rapid.OneOf(
		rapid.Int64Range(1, 20),
		rapid.Int64Range(1, 5000),
		rapid.Just(hi),
		rapid.Int64Range(1, hi),
	).Draw(t, label)
}

func tokenStepper(p TokenBucket) stepper[TokenBucketState] {
	return stepper[TokenBucketState]{
		fresh: p.Fresh, take: p.Take, peek: p.Peek, dead: p.Dead,
		maxCost: p.Burst, tightReset: true,
		atRest: func(pr policy.Probe) bool { return pr.Tokens == p.Burst },
	}
}

func TestTokenBucketProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := TokenBucket{Rate: drawRate(t, "rate", policy.MaxLimit), Burst: drawRate(t, "burst", policy.MaxLimit)}
		t0 := drawStart(t)
		ops := drawOps(t, p.FillMs(), p.Burst, 40)
		tokenStepper(p).run(t, newRefTokens(p.Rate, p.Burst, t0), t0, 1<<62, ops)
	})
}
