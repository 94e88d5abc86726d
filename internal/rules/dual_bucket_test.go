package rules

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/policy"
)

type dualStep struct {
	now, cost        int64
	peek             bool
	want             policy.Result
	requests, tokens int64 // Peek only
}

func runDualSteps(t *testing.T, p DualBucket, t0 int64, steps []dualStep) {
	t.Helper()
	s := p.Fresh(t0)
	for i, st := range steps {
		if st.peek {
			r, pr := p.Peek(s, st.now)
			if r != st.want || pr.Requests != st.requests || pr.Tokens != st.tokens {
				t.Fatalf("step %d peek at %d: %+v %+v, want %+v requests %d tokens %d", i, st.now, r, pr, st.want, st.requests, st.tokens)
			}
			continue
		}
		if r := p.Take(&s, st.now, st.cost); r != st.want {
			t.Fatalf("step %d take(%d) at %d: %+v, want %+v", i, st.cost, st.now, r, st.want)
		}
	}
}

func TestDualBucketSteps(t *testing.T) {
	t.Run("requests-bound", func(t *testing.T) {
		// 2 requests and 100 tokens per minute; credits in 1/60000. Fresh at 0 = {2, 100}.
		runDualSteps(t, DualBucket{RequestsPerMin: 2, TokensPerMin: 100}, 0, []dualStep{
			// {1, 70}; full: requests 60000/2 = 30000 ms, tokens 30*60000/100 = 18000 ms.
			{now: 0, cost: 30, want: policy.Result{Allowed: true, Limit: 100, Remaining: 70, ResetAtMs: 30000}},
			// cost 0 still spends a request: {0, 70}; Remaining 0 without a request; 2 requests: 60000 ms.
			{now: 0, cost: 0, want: policy.Result{Allowed: true, Limit: 100, Remaining: 0, ResetAtMs: 60000}},
			// no request: ceil(60000/2) = 30000 ms; the tokens are there.
			{now: 0, cost: 1, want: policy.Result{Limit: 100, RetryAfterMs: 30000, ResetAtMs: 60000}},
			// 1000 ms: request credit 2000 (0 requests), tokens credit 100000 -> 71, credit 40000;
			// wait ceil(58000/2) = 29000; full: requests ceil(118000/2) = 59000 ms.
			{now: 1000, peek: true, want: policy.Result{Limit: 100, RetryAfterMs: 29000, ResetAtMs: 60000}, requests: 0, tokens: 71},
			// 30000 ms from 0: requests 1 (credit 60000); tokens 70 + 50 -> 100 (saturated). -> {0, 20};
			// full: requests 60000 ms, tokens 80*60000/100 = 48000 ms.
			{now: 30000, cost: 80, want: policy.Result{Allowed: true, Limit: 100, Remaining: 0, ResetAtMs: 90000}},
			// 15000 ms: request credit 30000 (0), tokens 20 + 25 = 45. requests ceil(30000/2) = 15000,
			// tokens ceil(5*60000/100) = 3000: the larger, 15000.
			{now: 45000, cost: 50, want: policy.Result{Limit: 100, RetryAfterMs: 15000, ResetAtMs: 90000}},
			// 101 > 100 tokens per minute: never admissible.
			{now: 45000, cost: 101, want: policy.Result{Limit: 100, ResetAtMs: 90000}},
			// 15000 ms more: 1 request, 60 tokens -> {0, 10}; full: requests 60000, tokens 90*600 = 54000.
			{now: 60000, cost: 50, want: policy.Result{Allowed: true, Limit: 100, Remaining: 0, ResetAtMs: 120000}},
		})
	})
	t.Run("tokens-bound", func(t *testing.T) {
		// 60000 requests per minute (1 per ms), 60 tokens per minute (1 per second).
		runDualSteps(t, DualBucket{RequestsPerMin: 60000, TokensPerMin: 60}, 0, []dualStep{
			// {59999, 0}; full: requests 60000/60000 = 1 ms, tokens 60*60000/60 = 60000 ms.
			{now: 0, cost: 60, want: policy.Result{Allowed: true, Limit: 60, Remaining: 0, ResetAtMs: 60000}},
			// 500 ms: requests full; token credit 30000: ceil(30000/60) = 500 ms; full at 500 + 59500.
			{now: 500, cost: 1, want: policy.Result{Limit: 60, RetryAfterMs: 500, ResetAtMs: 60000}},
			// 1000 ms: 1 token, credit 0; 2 need 60000 more: 1000 ms.
			{now: 1000, cost: 2, want: policy.Result{Limit: 60, Remaining: 1, RetryAfterMs: 1000, ResetAtMs: 60000}},
			{now: 2000, peek: true, want: policy.Result{Allowed: true, Limit: 60, Remaining: 2, ResetAtMs: 60000}, requests: 60000, tokens: 2},
		})
	})
	t.Run("extremes", func(t *testing.T) {
		// Both MaxLimit per minute at 2^41.
		const t0 = 1 << 41
		runDualSteps(t, DualBucket{RequestsPerMin: policy.MaxLimit, TokensPerMin: policy.MaxLimit}, t0, []dualStep{
			// tokens full again after MaxLimit*60000/MaxLimit = 60000 ms.
			{now: t0, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + 60000}},
			// ceil(60000/MaxLimit) = 1 ms.
			{now: t0, cost: 1, want: policy.Result{Limit: policy.MaxLimit, RetryAfterMs: 1, ResetAtMs: t0 + 60000}},
			// 1 ms: token credit MaxLimit = 71582*60000 + 47295 -> 71582 tokens; the rest,
			// (MaxLimit-71582)*60000-47295 = 59999*MaxLimit exactly, takes 59999 ms.
			{now: t0 + 1, peek: true, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, Remaining: 71582, ResetAtMs: t0 + 60000}, requests: policy.MaxLimit, tokens: 71582},
			{now: t0 + 60000, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, ResetAtMs: t0 + 120000}},
		})
		// One request per minute, MaxLimit tokens.
		runDualSteps(t, DualBucket{RequestsPerMin: 1, TokensPerMin: policy.MaxLimit}, t0, []dualStep{
			{now: t0, cost: 0, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, Remaining: 0, ResetAtMs: t0 + 60000}},
			// request credit 59999: 1 ms more.
			{now: t0 + 59999, cost: 0, want: policy.Result{Limit: policy.MaxLimit, RetryAfterMs: 1, ResetAtMs: t0 + 60000}},
			{now: t0 + 60000, cost: policy.MaxLimit, want: policy.Result{Allowed: true, Limit: policy.MaxLimit, Remaining: 0, ResetAtMs: t0 + 120000}},
		})
	})
}

func TestDualBucketDead(t *testing.T) {
	p := DualBucket{RequestsPerMin: 2, TokensPerMin: 100}
	s := p.Fresh(0)
	if !p.Dead(s, 0) || p.Dead(p.Fresh(10), 9) {
		t.Fatal("full buckets are dead, unless stamped after now")
	}
	p.Take(&s, 0, 1) // {1, 99}: requests full after 30000 ms, tokens after 600 ms
	if p.Dead(s, 600) || p.Dead(s, 29999) {
		t.Fatal("not dead while the request bucket is short")
	}
	if !p.Dead(s, 30000) {
		t.Fatal("both full at 30000: dead")
	}
}

// refDual is two reference buckets in sixty-thousandths.
type refDual struct{ req, tok refBucket }

func (r *refDual) take(now, cost int64) (bool, int64) {
	r.req.advance(now)
	r.tok.advance(now)
	ok := r.req.have >= DualPeriodMs && cost <= r.tok.size && r.tok.have >= cost*DualPeriodMs
	if ok {
		r.req.have -= DualPeriodMs
		r.tok.have -= cost * DualPeriodMs
	}
	if r.req.have < DualPeriodMs {
		return ok, 0
	}
	return ok, r.tok.have / DualPeriodMs
}

func (r *refDual) probe(now int64) policy.Probe {
	r.req.advance(now)
	r.tok.advance(now)
	return policy.Probe{Requests: r.req.have / DualPeriodMs, Tokens: r.tok.have / DualPeriodMs}
}

func TestDualBucketProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := DualBucket{RequestsPerMin: drawRate(t, "requests", policy.MaxLimit), TokensPerMin: drawRate(t, "tokens", policy.MaxLimit)}
		t0 := drawStart(t)
		st := stepper[DualBucketState]{
			fresh: p.Fresh, take: p.Take, peek: p.Peek, dead: p.Dead,
			maxCost: p.TokensPerMin, tightReset: true,
			atRest: func(pr policy.Probe) bool { return pr.Requests == p.RequestsPerMin && pr.Tokens == p.TokensPerMin },
		}
		ref := &refDual{
			req: refBucket{unit: DualPeriodMs, rate: p.RequestsPerMin, size: p.RequestsPerMin, have: p.RequestsPerMin * DualPeriodMs, last: t0},
			tok: refBucket{unit: DualPeriodMs, rate: p.TokensPerMin, size: p.TokensPerMin, have: p.TokensPerMin * DualPeriodMs, last: t0},
		}
		st.run(t, ref, t0, 1<<62, drawOps(t, DualPeriodMs, p.TokensPerMin, 40))
	})
}
