package redisstore

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// The reference is the engine's own decision function: internal/rules' pure step per key,
// with the engine's mapping to a Decision (engine/core.go). Two checks that do not trust it run
// alongside: every solved RetryAfter is compared with a search for the least wait on copies of
// the state, and GCRA is also run through a literal math/big reading of docs/policies.md (TAT in
// now*rate units, which overflow neither there nor in the scripts' (ms, remainder) form).

type refModel interface {
	take(key int, now, cost int64) engine.Decision
}

func dec(r policy.Result, cost int64) engine.Decision {
	d := engine.Decision{Allowed: r.Allowed, Limit: r.Limit, Remaining: r.Remaining,
		RetryAfter: time.Duration(r.RetryAfterMs) * time.Millisecond, ResetAt: time.UnixMilli(r.ResetAtMs)}
	if !r.Allowed {
		d.Reason = engine.ReasonLimited
		if cost > r.Limit {
			d.Reason = engine.ReasonCostAboveLimit
		}
	}
	return d
}

// searchMin returns the least t in [lo, hi] with ok(t), for ok monotone (false then true), or -1.
func searchMin(lo, hi int64, ok func(int64) bool) int64 {
	if !ok(hi) {
		return -1
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// stepModel runs one policy's pure step over a map of keys.
type stepModel[S any] struct {
	t       *testing.T
	limit   int64
	horizon int64 // longest possible wait, for the search
	fresh   func(now int64) S
	step    func(s *S, now, cost int64) policy.Result
	// solvable says whether the solved wait is exact for s at now (the sliding counter's is not
	// for a state from a later window than now's: time ran backwards, see the report).
	solvable   func(s S, now int64) bool
	beforeLook func(cost int64) bool // GCRA: false refuses before any lookup
	clone      func(S) S             // sliding log: a copy that shares no ring
	spendsZero bool                  // dual bucket: cost 0 spends a request, and is stored
	st         map[int]*S
	big        *refGCRA
}

func (m *stepModel[S]) take(key int, now, cost int64) engine.Decision {
	if m.beforeLook != nil && !m.beforeLook(cost) {
		return engine.Decision{Limit: m.limit, Reason: engine.ReasonCostAboveLimit}
	}
	before, ok := m.st[key]
	if !ok {
		f := m.fresh(now)
		before = &f
	}
	// Redis stores a state only when it counts something (a refusal, or cost 0, writes nothing).
	// With times that never run backwards that is invisible, the roll being idempotent; with
	// times that do, the model must do the same to predict Redis.
	cp := func(s S) S {
		if m.clone != nil {
			return m.clone(s)
		}
		return s
	}
	after := cp(*before)
	r := m.step(&after, now, cost)
	if r.Allowed && (cost > 0 || m.spendsZero) {
		m.st[key] = &after
	}
	if !r.Allowed && r.RetryAfterMs > 0 && (m.solvable == nil || m.solvable(*before, now)) {
		admitted := func(t int64) bool {
			c := cp(*before)
			return m.step(&c, now+t, cost).Allowed
		}
		if got := searchMin(1, m.horizon, admitted); got != r.RetryAfterMs {
			m.t.Fatalf("state %+v now %d cost %d: solved RetryAfter %d, searched %d", *before, now, cost, r.RetryAfterMs, got)
		}
	}
	d := dec(r, cost)
	if m.big != nil {
		if b := m.big.take(key, now, cost); !sameDecision(b, d) {
			m.t.Fatalf("GCRA at %d cost %d: policy step %+v, literal docs/policies.md %+v", now, cost, d, b)
		}
	}
	return d
}

type refGCRA struct {
	rate, burst int64
	tat         map[int]*big.Int
}

func bi(v int64) *big.Int { return big.NewInt(v) }

// ceilDivBig is ceil(a/b) for b > 0.
func ceilDivBig(a, b *big.Int) *big.Int {
	q, m := new(big.Int).DivMod(a, b, new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, bi(1))
	}
	return q
}

func (m *refGCRA) take(key int, now, cost int64) engine.Decision {
	if cost > m.burst {
		return engine.Decision{Limit: m.burst, Reason: engine.ReasonCostAboveLimit}
	}
	rate := bi(m.rate)
	s := new(big.Int).Mul(bi(now), rate)
	tat, ok := m.tat[key]
	if !ok {
		tat = new(big.Int).Set(s)
	}
	// refuse iff s < tat - tolerance + (cost-1)*1000, tolerance = (burst-1)*1000
	bound := new(big.Int).Sub(tat, bi((m.burst-1)*1000))
	bound.Add(bound, bi((cost-1)*1000))
	r := policy.Result{Allowed: s.Cmp(bound) >= 0, Limit: m.burst}
	if r.Allowed {
		nt := new(big.Int).Set(s)
		if tat.Cmp(s) > 0 {
			nt.Set(tat)
		}
		tat = nt.Add(nt, bi(cost*1000))
		m.tat[key] = tat
	} else {
		r.RetryAfterMs = ceilDivBig(bound, rate).Int64() - now
	}
	if avail := new(big.Int).Sub(s, new(big.Int).Sub(tat, bi(m.burst*1000))); avail.Sign() > 0 {
		r.Remaining = min(m.burst, new(big.Int).Div(avail, bi(1000)).Int64())
	}
	r.ResetAtMs = now
	if tat.Cmp(s) > 0 {
		r.ResetAtMs = ceilDivBig(tat, rate).Int64()
	}
	return dec(r, cost)
}

func newRef(t *testing.T, p policy.Policy) refModel {
	switch p := p.(type) {
	case policy.SlidingCounter:
		w := rules.SlidingCounter(p).WindowMs()
		return &stepModel[rules.SlidingCounterState]{t: t, limit: p.Limit, horizon: 2*w + 1,
			fresh: rules.SlidingCounter(p).Fresh, step: rules.SlidingCounter(p).Take, st: map[int]*rules.SlidingCounterState{},
			solvable: func(s rules.SlidingCounterState, now int64) bool { return s.Window <= now-now%w }}
	case policy.FixedWindow:
		return &stepModel[rules.FixedWindowState]{t: t, limit: p.Limit, horizon: 2 * rules.FixedWindow(p).WindowMs(),
			fresh: rules.FixedWindow(p).Fresh, step: rules.FixedWindow(p).Take, st: map[int]*rules.FixedWindowState{}}
	case policy.TokenBucket:
		return &stepModel[rules.TokenBucketState]{t: t, limit: p.Burst, horizon: 2*rules.TokenBucket(p).FillMs() + 8,
			fresh: rules.TokenBucket(p).Fresh, step: rules.TokenBucket(p).Take, st: map[int]*rules.TokenBucketState{}}
	case policy.SlidingLog:
		return &stepModel[rules.SlidingLogState]{t: t, limit: p.Limit, horizon: 2*rules.SlidingLog(p).WindowMs() + 16,
			fresh: rules.SlidingLog(p).Fresh, step: rules.SlidingLog(p).Take, st: map[int]*rules.SlidingLogState{},
			clone: func(s rules.SlidingLogState) rules.SlidingLogState { return s.Clone() }}
	case policy.LeakyBucket:
		return &stepModel[rules.LeakyBucketState]{t: t, limit: p.Capacity, horizon: 2*rules.LeakyBucket(p).DrainMs() + 8,
			fresh: rules.LeakyBucket(p).Fresh, step: rules.LeakyBucket(p).Take, st: map[int]*rules.LeakyBucketState{}}
	case policy.DualBucket:
		return &stepModel[rules.DualBucketState]{t: t, limit: p.TokensPerMin, horizon: 2*rules.DualPeriodMs + 8, spendsZero: true,
			fresh: rules.DualBucket(p).Fresh, step: rules.DualBucket(p).Take, st: map[int]*rules.DualBucketState{}}
	case policy.GCRA:
		return &stepModel[rules.GCRAState]{t: t, limit: p.Burst, horizon: 2*ceilDiv(p.Burst*1000, p.Rate) + 8,
			fresh: rules.GCRA(p).Fresh, st: map[int]*rules.GCRAState{}, beforeLook: rules.GCRA(p).CheckCost,
			step: func(s *rules.GCRAState, now, cost int64) policy.Result {
				return rules.GCRA(p).Take(s, now, cost)
			},
			big: &refGCRA{rate: p.Rate, burst: p.Burst, tat: map[int]*big.Int{}}}
	}
	t.Fatalf("no reference for %T", p)
	return nil
}

// span is a policy's natural time scale, for the random steps.
func span(p policy.Policy) int64 {
	switch p := p.(type) {
	case policy.SlidingCounter:
		return rules.SlidingCounter(p).WindowMs()
	case policy.FixedWindow:
		return p.Window.Milliseconds()
	case policy.TokenBucket:
		return ceilDiv(p.Burst*1000, p.Rate)
	case policy.GCRA:
		return ceilDiv(p.Burst*1000, p.Rate)
	case policy.SlidingLog:
		return rules.SlidingLog(p).WindowMs()
	case policy.LeakyBucket:
		return rules.LeakyBucket(p).DrainMs()
	case policy.DualBucket:
		return rules.DualPeriodMs
	}
	return 1000
}

func limitOf(p policy.Policy) int64 {
	switch p := p.(type) {
	case policy.SlidingCounter:
		return p.Limit
	case policy.FixedWindow:
		return p.Limit
	case policy.TokenBucket:
		return p.Burst
	case policy.GCRA:
		return p.Burst
	case policy.SlidingLog:
		return p.Limit
	case policy.LeakyBucket:
		return p.Capacity
	case policy.DualBucket:
		return p.TokensPerMin
	}
	return 1
}

// step is one request of a random sequence.
type step struct {
	key       int
	now, cost int64
}

// randomSteps draws a sequence over 3 keys: time mostly moves forward by small fractions of the
// policy's span, sometimes jumps whole spans, rarely stands still or steps back a little (another
// host's clock); costs are mostly 1, sometimes 0, near the limit, or above it.
func randomSteps(r *rand.Rand, p policy.Policy, start int64, n int, back bool) []step {
	return randomStepsScaled(r, p, start, n, back, span(p))
}

// randomStepsScaled is randomSteps with its time scale set to sp.
func randomStepsScaled(r *rand.Rand, p policy.Policy, start int64, n int, back bool, sp int64) []step {
	lim := limitOf(p)
	end := int64(MaxTimeMs)
	now := start
	out := make([]step, n)
	for i := range out {
		switch x := r.IntN(100); {
		case x < 55:
			now += r.Int64N(max(sp/8, 1) + 1)
		case x < 70:
			now += r.Int64N(max(sp/100, 1) + 1)
		case x < 80:
			now += max(sp-2+r.Int64N(5), 0) // around a window edge or a full refill
		case x < 85:
			now += r.Int64N(3*sp + 1)
		case x < 88 && back:
			now = max(now-r.Int64N(5), 0)
		}
		now = min(now, end)
		var cost int64
		switch x := r.IntN(100); {
		case x < 5:
			cost = 0
		case x < 60:
			cost = 1
		case x < 85:
			cost = 1 + r.Int64N(min(lim, 1<<20))
		case x < 95:
			cost = max(lim-r.Int64N(3), 1)
		default:
			cost = lim + 1 + r.Int64N(3)
		}
		out[i] = step{key: r.IntN(3), now: now, cost: cost}
	}
	return out
}

// policyCases covers small and extreme configurations of every policy, at today's time and at
// times far past 2^31 and 2^41 ms.
func policyCases() []struct {
	p     policy.Policy
	start int64
} {
	const today = 1_760_000_000_123
	const maxL = policy.MaxLimit
	maxW := policy.MaxWindow
	return []struct {
		p     policy.Policy
		start int64
	}{
		{policy.SlidingCounter{Limit: 5, Window: time.Second}, today},
		{policy.SlidingCounter{Limit: 1, Window: time.Millisecond}, today},
		{policy.SlidingCounter{Limit: 7, Window: 3 * time.Millisecond}, 0},
		{policy.SlidingCounter{Limit: 100, Window: 997 * time.Millisecond}, today},
		{policy.SlidingCounter{Limit: maxL, Window: maxW}, today},
		{policy.SlidingCounter{Limit: maxL, Window: 1000 * time.Millisecond}, MaxTimeMs - 5000},
		{policy.SlidingCounter{Limit: 3, Window: maxW}, 1 << 45},
		{policy.SlidingCounter{Limit: maxL - 1, Window: maxW - time.Millisecond}, 1<<41 + 12345},
		{policy.FixedWindow{Limit: 5, Window: time.Second}, today},
		{policy.FixedWindow{Limit: maxL, Window: maxW}, today},
		{policy.FixedWindow{Limit: 2, Window: 7 * time.Millisecond}, MaxTimeMs - 1000},
		{policy.TokenBucket{Rate: 10, Burst: 5}, today},
		{policy.TokenBucket{Rate: 3, Burst: 7}, today},
		{policy.TokenBucket{Rate: 1, Burst: maxL}, today},
		{policy.TokenBucket{Rate: maxL, Burst: maxL}, today},
		{policy.TokenBucket{Rate: maxL, Burst: 1}, MaxTimeMs - 1000},
		{policy.TokenBucket{Rate: 999, Burst: 1000}, 1 << 45},
		{policy.GCRA{Rate: 10, Burst: 5}, today},
		{policy.GCRA{Rate: 3, Burst: 7}, today},
		{policy.GCRA{Rate: 1, Burst: maxL}, today},
		{policy.GCRA{Rate: maxL, Burst: maxL}, today},
		{policy.GCRA{Rate: maxL, Burst: 1}, MaxTimeMs - 1000},
		{policy.GCRA{Rate: 999, Burst: 1000}, 1 << 45},
		{policy.SlidingLog{Limit: 5, Window: time.Second}, today},
		{policy.SlidingLog{Limit: 1, Window: time.Millisecond}, today},
		{policy.SlidingLog{Limit: 7, Window: 3 * time.Millisecond}, 0},
		{policy.SlidingLog{Limit: 100, Window: 997 * time.Millisecond}, today},
		{policy.SlidingLog{Limit: policy.MaxLogLimit, Window: maxW}, today},
		{policy.SlidingLog{Limit: 3, Window: maxW}, 1 << 45},
		{policy.SlidingLog{Limit: 50, Window: time.Second}, MaxTimeMs - 5000},
		{policy.LeakyBucket{Rate: 10, Capacity: 5}, today},
		{policy.LeakyBucket{Rate: 3, Capacity: 7}, today},
		{policy.LeakyBucket{Rate: 1, Capacity: maxL}, today},
		{policy.LeakyBucket{Rate: maxL, Capacity: maxL}, today},
		{policy.LeakyBucket{Rate: maxL, Capacity: 1}, MaxTimeMs - 1000},
		{policy.LeakyBucket{Rate: 999, Capacity: 1000}, 1 << 45},
		{policy.DualBucket{RequestsPerMin: 5, TokensPerMin: 100}, today},
		{policy.DualBucket{RequestsPerMin: 100, TokensPerMin: 7}, today},
		{policy.DualBucket{RequestsPerMin: 1, TokensPerMin: maxL}, today},
		{policy.DualBucket{RequestsPerMin: maxL, TokensPerMin: maxL}, today},
		{policy.DualBucket{RequestsPerMin: maxL, TokensPerMin: 1}, MaxTimeMs - 200_000},
		{policy.DualBucket{RequestsPerMin: 7, TokensPerMin: 61}, 1 << 45},
	}
}

func caseName(p policy.Policy, start int64) string {
	return fmt.Sprintf("%s/%+v/t=%d", p.ID(), p, start)
}

func mustNew(t testing.TB, name string, p policy.Policy, opts ...Option) *Limiter {
	t.Helper()
	// A generous deadline first (a test's own options may override it): a loaded machine can
	// stall a healthy reply past the 50ms default.
	l, err := New(newClient(t, testAddr), name, p, append([]Option{WithTimeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("New(%s, %+v): %v", name, p, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func sameDecision(a, b engine.Decision) bool {
	return a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining &&
		a.RetryAfter == b.RetryAfter && a.ResetAt.Equal(b.ResetAt) && a.Reason == b.Reason
}

// TestScriptsMatchReference runs random sequences through each script, with the deny cache off
// and on, and requires every Decision field to equal the reference model's.
func TestScriptsMatchReference(t *testing.T) {
	ctx := context.Background()
	for ci, c := range policyCases() {
		t.Run(caseName(c.p, c.start), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 7))
			clk := clock.NewManual(c.start)
			plain := mustNew(t, "plain", c.p, WithClock(clk), WithDenyCache(0))
			cached := mustNew(t, "cached", c.p, WithClock(clk))
			refPlain, refCached := newRef(t, c.p), newRef(t, c.p)
			for i, s := range randomSteps(r, c.p, c.start, 250, true) {
				clk.Set(s.now)
				key := fmt.Sprint("k", s.key)
				for _, x := range []struct {
					l   *Limiter
					ref refModel
				}{{plain, refPlain}, {cached, refCached}} {
					got, err := x.l.Take(ctx, key, s.cost)
					if err != nil {
						t.Fatalf("step %d: Take: %v", i, err)
					}
					if want := x.ref.take(s.key, s.now, s.cost); !sameDecision(got, want) {
						t.Fatalf("step %d (%s, now %d, cost %d), limiter %s:\n got %+v\nwant %+v", i, key, s.now, s.cost, x.l.Name(), got, want)
					}
				}
			}
			if st := statsOf(cached); st.DenyCacheHits == 0 {
				t.Logf("deny cache answered none of %d calls", st.Calls)
			}
		})
	}
}

// TestRetryAfterIsExact checks, on Redis itself, the property docs/policies.md ("Rules every policy
// shares") asks of every policy: with no other traffic, a request refused with RetryAfter r is
// still refused at r-1 ms (r is the least wait) and admitted at r. A refused request writes
// nothing, so probing changes nothing; the admitted probe is counted, and the rest of the sequence
// is shifted past it so that time never runs backwards.
func TestRetryAfterIsExact(t *testing.T) {
	ctx := context.Background()
	for ci, c := range policyCases() {
		t.Run(caseName(c.p, c.start), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 11))
			clk := clock.NewManual(c.start)
			l := mustNew(t, "retry", c.p, WithClock(clk), WithDenyCache(0))
			take := func(key string, now, cost int64) engine.Decision {
				t.Helper()
				clk.Set(now)
				d, err := l.Take(ctx, key, cost)
				if err != nil {
					t.Fatalf("Take(%s, %d) at %d: %v", key, cost, now, err)
				}
				return d
			}
			checked, shift := 0, int64(0)
			// The scale is capped so that the waits of the slowest buckets still fit before the
			// time bound.
			for i, s := range randomStepsScaled(r, c.p, c.start, 150, false, min(span(c.p), 1<<30)) {
				now := s.now + shift
				if now > l.algo.maxTime {
					break
				}
				key := fmt.Sprint("k", s.key)
				d := take(key, now, s.cost)
				wait := d.RetryAfter.Milliseconds()
				if d.Allowed || wait == 0 || checked >= 20 || now+wait > l.algo.maxTime {
					continue
				}
				checked++
				if wait > 1 {
					if e := take(key, now+wait-1, s.cost); e.Allowed {
						t.Fatalf("step %d: %s cost %d refused at %d with RetryAfter %dms, but admitted %dms later", i, key, s.cost, now, wait, wait-1)
					}
				}
				if e := take(key, now+wait, s.cost); !e.Allowed {
					t.Fatalf("step %d: %s cost %d refused at %d with RetryAfter %dms, and refused again then: %+v", i, key, s.cost, now, wait, e)
				}
				shift += wait
			}
			if checked == 0 {
				t.Fatalf("no refusal with a wait in the sequence: the test checked nothing")
			}
		})
	}
}
