package rules

import (
	"math"
	"math/bits"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/policy"
)

// This file holds what the six policies' tests share: a property harness that replays random
// request sequences through a policy and checks every promise the policies make in common, and
// plain reference models written from docs/policies.md in a different form from the code under test
// (total thousandths instead of units plus credit, a slice of int64 instead of a packed ring),
// with overflow-proof arithmetic, so that they can check the code at the extremes.

// stepper adapts one policy to the harness.
type stepper[S any] struct {
	fresh   func(now int64) S
	take    func(s *S, now, cost int64) policy.Result
	peek    func(s S, now int64) (policy.Result, policy.Probe)
	dead    func(s S, now int64) bool
	clone   func(s S) S             // nil: a plain copy is a snapshot
	maxCost int64                   // the largest cost that can ever be admitted
	atRest  func(policy.Probe) bool // what Peek shows at ResetAtMs: full bucket, empty bucket or log
	// tightReset: at ResetAtMs - 1 the state is not yet at rest (false for the fixed window,
	// whose reset is the window end whatever the count).
	tightReset bool
}

func (m stepper[S]) cp(s S) S {
	if m.clone != nil {
		return m.clone(s)
	}
	return s
}

// refModel is an independent model of one key: the expected Allowed and Remaining of a take, and
// the expected probe.
type refModel interface {
	take(now, cost int64) (bool, int64)
	probe(now int64) policy.Probe
}

type stepOp struct {
	dt, cost int64
	peek     bool
}

// drawOps draws a request sequence whose gaps mix same-millisecond bursts, steps around scale
// (the policy's window, fill or drain time) and long idle spans, and whose costs mix small ones
// with the largest admissible cost and one above it.
func drawOps(t *rapid.T, scale, maxCost int64, n int) []stepOp {
	scale = max(scale, 1)
	dts := rapid.OneOf(
		rapid.Int64Range(0, 2),
		rapid.Int64Range(0, scale),
		rapid.Int64Range(scale-1, scale+1),
		rapid.Int64Range(0, 3*scale),
	)
	costs := rapid.OneOf(
		rapid.Int64Range(0, 3),
		rapid.Int64Range(0, maxCost),
		rapid.Just(maxCost),
		rapid.Just(maxCost+1),
	)
	ops := make([]stepOp, rapid.IntRange(1, n).Draw(t, "len"))
	for i := range ops {
		ops[i] = stepOp{dt: dts.Draw(t, "dt"), cost: costs.Draw(t, "cost"), peek: rapid.IntRange(0, 4).Draw(t, "kind") == 0}
	}
	return ops
}

// drawStart draws a start time: small, just above 2^31 ms, or around 2^41 ms (today's clock).
func drawStart(t *rapid.T) int64 {
	return rapid.OneOf(
		rapid.Int64Range(0, 10_000),
		rapid.Int64Range(1<<31, 1<<31+100_000),
		rapid.Int64Range(1<<41-100_000, 1<<41+100_000),
	).Draw(t, "start")
}

// run replays ops from t0 and checks, at every step:
//   - a refused Take leaves the state's observable behaviour unchanged: B, a twin that never sees
//     refused takes (not even their refill), gives the same results as A, which sees them all;
//   - the reference model agrees on Allowed, Remaining and the probe;
//   - waiting exactly RetryAfterMs admits the same cost and waiting 1 ms less does not; a cost that
//     can never be admitted has RetryAfterMs 0, and an admitted one too;
//   - Remaining is in [0, Limit], and Peek agrees with a unit Take on a copy;
//   - ResetAtMs >= now and Peek there shows the state at rest (and, where tight, not 1 ms earlier);
//   - once Dead reports true, a fresh state from then on decides exactly as the old one.
//
// maxNow caps the clock (GCRA's documented range).
func (m stepper[S]) run(t *rapid.T, ref refModel, t0, maxNow int64, ops []stepOp) {
	a := m.fresh(t0)
	b := m.cp(a)
	var shadow *S
	if !m.dead(a, t0) {
		t.Fatalf("Fresh(%d) is not Dead at %d", t0, t0)
	}
	now := t0
	for i, op := range ops {
		now = min(now+op.dt, maxNow)
		if shadow == nil && m.dead(a, now) {
			f := m.fresh(now)
			shadow = &f
		}
		if op.peek {
			ra, pa := m.peek(a, now)
			rb, pb := m.peek(b, now)
			if ra != rb || pa != pb {
				t.Fatalf("op %d peek at %d: A %+v %+v, B %+v %+v", i, now, ra, pa, rb, pb)
			}
			if want := ref.probe(now); pa != want {
				t.Fatalf("op %d peek at %d: probe %+v, reference %+v", i, now, pa, want)
			}
			c := m.cp(a)
			rt := m.take(&c, now, 1)
			if ra.Allowed != rt.Allowed || ra.RetryAfterMs != rt.RetryAfterMs || ra.Limit != rt.Limit ||
				(!ra.Allowed && ra != rt) {
				t.Fatalf("op %d peek at %d: %+v, but a unit take gives %+v", i, now, ra, rt)
			}
			m.checkResult(t, i, a, m.cp(a), now, 1, ra)
			if shadow != nil {
				if rs, ps := m.peek(*shadow, now); rs != ra || ps != pa {
					t.Fatalf("op %d peek at %d: dead state gives %+v %+v, fresh one %+v %+v", i, now, ra, pa, rs, ps)
				}
			}
			continue
		}
		before := m.cp(a)
		ra := m.take(&a, now, op.cost)
		c := m.cp(b)
		if rb := m.take(&c, now, op.cost); rb != ra {
			t.Fatalf("op %d take(%d) at %d: %+v, but %+v on a twin that never saw refused takes", i, op.cost, now, ra, rb)
		}
		if ra.Allowed {
			b = c
		}
		if wantOK, wantRem := ref.take(now, op.cost); ra.Allowed != wantOK || ra.Remaining != wantRem {
			t.Fatalf("op %d take(%d) at %d: %+v, reference allowed=%v remaining=%d", i, op.cost, now, ra, wantOK, wantRem)
		}
		m.checkResult(t, i, before, m.cp(a), now, op.cost, ra)
		if shadow != nil {
			if rs := m.take(shadow, now, op.cost); rs != ra {
				t.Fatalf("op %d take(%d) at %d: dead state gives %+v, fresh one %+v", i, op.cost, now, ra, rs)
			}
		}
	}
}

// checkResult checks r, the result of a request of cost at now on state s (as it was before);
// after is the state r describes (s after the take; s itself for a peek).
func (m stepper[S]) checkResult(t *rapid.T, i int, s, after S, now, cost int64, r policy.Result) {
	if r.Remaining < 0 || r.Remaining > r.Limit {
		t.Fatalf("op %d cost %d at %d: Remaining %d outside [0, %d]", i, cost, now, r.Remaining, r.Limit)
	}
	switch {
	case r.Allowed || cost > m.maxCost:
		if r.RetryAfterMs != 0 {
			t.Fatalf("op %d cost %d at %d: %+v: RetryAfterMs should be 0", i, cost, now, r)
		}
	default:
		ra := r.RetryAfterMs
		if ra < 1 {
			t.Fatalf("op %d cost %d at %d: refused with RetryAfterMs %d", i, cost, now, ra)
		}
		c := m.cp(s)
		if got := m.take(&c, now+ra, cost); !got.Allowed {
			t.Fatalf("op %d cost %d at %d: refused again after RetryAfterMs %d: %+v", i, cost, now, ra, got)
		}
		c = m.cp(s)
		if got := m.take(&c, now+ra-1, cost); got.Allowed {
			t.Fatalf("op %d cost %d at %d: admitted 1 ms before RetryAfterMs %d", i, cost, now, ra)
		}
	}
	if r.ResetAtMs < now {
		t.Fatalf("op %d cost %d at %d: ResetAtMs %d in the past", i, cost, now, r.ResetAtMs)
	}
	if _, p := m.peek(after, r.ResetAtMs); !m.atRest(p) {
		t.Fatalf("op %d cost %d at %d: not at rest at ResetAtMs %d: %+v", i, cost, now, r.ResetAtMs, p)
	}
	if m.tightReset && r.ResetAtMs > now {
		if _, p := m.peek(after, r.ResetAtMs-1); m.atRest(p) {
			t.Fatalf("op %d cost %d at %d: already at rest 1 ms before ResetAtMs %d: %+v", i, cost, now, r.ResetAtMs, p)
		}
	}
}

// addCapped returns min(limit, v + a*b) for 0 <= v <= limit and a, b >= 0, without overflow.
func addCapped(v, a, b, limit int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo >= uint64(limit-v) {
		return limit
	}
	return v + int64(lo)
}

// subFloored returns max(0, v - a*b) for v >= 0 and a, b >= 0, without overflow.
func subFloored(v, a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo >= uint64(v) {
		return 0
	}
	return v - int64(lo)
}

// refBucket is a token bucket as total thousandths (or sixty-thousandths) of a unit, filling at
// rate per ms up to size. docs/policies.md's tokens+credit state is the same quantity split in two.
type refBucket struct {
	unit, rate, size int64 // size in units
	have, last       int64 // have in 1/unit
}

func (r *refBucket) advance(now int64) {
	if now > r.last {
		r.have = addCapped(r.have, r.rate, now-r.last, r.size*r.unit)
		r.last = now
	}
}

func (r *refBucket) take(now, cost int64) (bool, int64) {
	r.advance(now)
	ok := cost <= r.size && r.have >= cost*r.unit
	if ok {
		r.have -= cost * r.unit
	}
	return ok, r.have / r.unit
}

func (r *refBucket) probe(now int64) policy.Probe {
	r.advance(now)
	return policy.Probe{Tokens: r.have / r.unit}
}

func newRefTokens(rate, burst, t0 int64) *refBucket {
	return &refBucket{unit: 1000, rate: rate, size: burst, have: burst * 1000, last: t0}
}

// TestStateSizes pins the per-key state sizes the doc comments promise (the engine sizes its
// cells and its memory figures on them).
func TestStateSizes(t *testing.T) {
	for _, c := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"FixedWindowState", unsafe.Sizeof(FixedWindowState{}), 16},
		{"TokenBucketState", unsafe.Sizeof(TokenBucketState{}), 24},
		{"GCRAState", unsafe.Sizeof(GCRAState{}), 8},
		{"LeakyBucketState", unsafe.Sizeof(LeakyBucketState{}), 24},
		{"DualBucketState", unsafe.Sizeof(DualBucketState{}), 40},
		{"SlidingLogState", unsafe.Sizeof(SlidingLogState{}), SlidingLogHeaderBytes},
	} {
		if c.name == "SlidingLogState" && unsafe.Sizeof(uintptr(0)) != 8 {
			continue // SlidingLogHeaderBytes is documented for 64-bit platforms, where slices are 24 bytes
		}
		if c.got != c.want {
			t.Errorf("unsafe.Sizeof(%s) = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// Sinks keep the calls under measurement from being optimized away.
var (
	sinkResult policy.Result
	sinkProbe  policy.Probe
	sinkDead   bool
	sinkSum    int64
)

// TestNoAllocs: no Take, Peek or Dead allocates (for the sliding log, on a state from Fresh).
func TestNoAllocs(t *testing.T) {
	const now = 1 << 41
	fw := FixedWindow{Limit: 10, Window: time.Second}
	fws := fw.Fresh(now)
	tb := TokenBucket{Rate: 10, Burst: 10}
	tbs := tb.Fresh(now)
	g := GCRA{Rate: 10, Burst: 10}
	gs := g.Fresh(now)
	lb := LeakyBucket{Rate: 10, Capacity: 10}
	lbs := lb.Fresh(now)
	db := DualBucket{RequestsPerMin: 10, TokensPerMin: 100}
	dbs := db.Fresh(now)
	sl := SlidingLog{Limit: 10, Window: time.Second}
	sls := sl.Fresh(now)
	var tick int64
	for name, f := range map[string]func(){
		"FixedWindow": func() {
			fw.Take(&fws, now+tick, 1)
			sinkResult, sinkProbe = fw.Peek(fws, now+tick)
			sinkDead = fw.Dead(fws, now+tick)
		},
		"TokenBucket": func() {
			tb.Take(&tbs, now+tick, 1)
			sinkResult, sinkProbe = tb.Peek(tbs, now+tick)
			sinkDead = tb.Dead(tbs, now+tick)
		},
		"GCRA": func() {
			g.Take(&gs, now+tick, 1)
			sinkResult, sinkProbe = g.Peek(gs, now+tick)
			sinkDead = g.Dead(gs, now+tick)
		},
		"LeakyBucket": func() {
			lb.Take(&lbs, now+tick, 1)
			sinkResult, sinkProbe = lb.Peek(lbs, now+tick)
			sinkDead = lb.Dead(lbs, now+tick)
		},
		"DualBucket": func() {
			db.Take(&dbs, now+tick, 1)
			sinkResult, sinkProbe = db.Peek(dbs, now+tick)
			sinkDead = db.Dead(dbs, now+tick)
		},
		"SlidingLog": func() {
			sl.Take(&sls, now+tick, 1)
			sinkResult, sinkProbe = sl.Peek(sls, now+tick)
			sinkDead = sl.Dead(sls, now+tick)
		},
	} {
		tick = 0
		if a := testing.AllocsPerRun(200, func() { tick += 37; f() }); a != 0 {
			t.Errorf("%s: %v allocations per Take+Peek+Dead, want 0", name, a)
		}
	}
}

// TestHugeCost: a cost near MaxInt64 is refused without overflow by every policy, consumes
// nothing, and has RetryAfterMs 0 (it can never be admitted).
func TestHugeCost(t *testing.T) {
	const now = 1<<41 + 5
	check := func(name string, r policy.Result) {
		t.Helper()
		if r.Allowed || r.RetryAfterMs != 0 || r.Remaining != r.Limit {
			t.Errorf("%s: take(MaxInt64) = %+v, want refused, RetryAfterMs 0, Remaining = Limit", name, r)
		}
	}
	fw := FixedWindow{Limit: policy.MaxLimit, Window: policy.MaxWindow}
	fws := fw.Fresh(now)
	check("FixedWindow", fw.Take(&fws, now, math.MaxInt64))
	tb := TokenBucket{Rate: policy.MaxLimit, Burst: policy.MaxLimit}
	tbs := tb.Fresh(now)
	check("TokenBucket", tb.Take(&tbs, now, math.MaxInt64))
	g := GCRA{Rate: policy.MaxLimit, Burst: policy.MaxLimit}
	gs := g.Fresh(now)
	check("GCRA", g.Take(&gs, now, math.MaxInt64))
	if g.CheckCost(math.MaxInt64) || g.CheckCost(policy.MaxLimit+1) || !g.CheckCost(policy.MaxLimit) || !g.CheckCost(0) {
		t.Error("GCRA.CheckCost: want false above Burst, true at Burst and 0")
	}
	lb := LeakyBucket{Rate: policy.MaxLimit, Capacity: policy.MaxLimit}
	lbs := lb.Fresh(now)
	check("LeakyBucket", lb.Take(&lbs, now, math.MaxInt64))
	db := DualBucket{RequestsPerMin: policy.MaxLimit, TokensPerMin: policy.MaxLimit}
	dbs := db.Fresh(now)
	check("DualBucket", db.Take(&dbs, now, math.MaxInt64))
	sl := SlidingLog{Limit: policy.MaxLogLimit, Window: policy.MaxWindow}
	sls := sl.Fresh(now)
	check("SlidingLog", sl.Take(&sls, now, math.MaxInt64))
}

// BenchmarkTake measures one Take (and one Peek) on one hot key, the clock advancing 1 ms every
// 16 calls, with limits of 100 per second so that both admissions and refusals occur. The loops
// are written out per policy so that no indirect call sits between the loop and the policy.
func BenchmarkTake(b *testing.B) {
	const t0 = 1 << 41
	b.Run("floor", func(b *testing.B) { // the loop and the sum alone, no policy work
		b.ReportAllocs()
		for i := range b.N {
			sinkSum += t0 + int64(i>>4)
		}
	})
	b.Run("fixed-window", func(b *testing.B) {
		p := FixedWindow{Limit: 100, Window: time.Second}
		s := p.Fresh(t0)
		b.ReportAllocs()
		for i := range b.N {
			r := p.Take(&s, t0+int64(i>>4), 1)
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs
		}
	})
	b.Run("sliding-log", func(b *testing.B) {
		p := SlidingLog{Limit: 100, Window: time.Second}
		s := p.Fresh(t0)
		b.ReportAllocs()
		for i := range b.N {
			r := p.Take(&s, t0+int64(i>>4), 1)
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs
		}
	})
	b.Run("token-bucket", func(b *testing.B) {
		p := TokenBucket{Rate: 100, Burst: 100}
		s := p.Fresh(t0)
		b.ReportAllocs()
		for i := range b.N {
			r := p.Take(&s, t0+int64(i>>4), 1)
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs
		}
	})
	b.Run("gcra", func(b *testing.B) {
		p := GCRA{Rate: 100, Burst: 100}
		s := p.Fresh(t0)
		b.ReportAllocs()
		for i := range b.N {
			r := p.Take(&s, t0+int64(i>>4), 1)
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs
		}
	})
	b.Run("leaky-bucket", func(b *testing.B) {
		p := LeakyBucket{Rate: 100, Capacity: 100}
		s := p.Fresh(t0)
		b.ReportAllocs()
		for i := range b.N {
			r := p.Take(&s, t0+int64(i>>4), 1)
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs
		}
	})
	b.Run("dual-bucket", func(b *testing.B) {
		p := DualBucket{RequestsPerMin: 6000, TokensPerMin: 6000}
		s := p.Fresh(t0)
		b.ReportAllocs()
		for i := range b.N {
			r := p.Take(&s, t0+int64(i>>4), 1)
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs
		}
	})
}

// BenchmarkPeek measures one Peek on a key kept at its limit (so RetryAfterMs is solved).
func BenchmarkPeek(b *testing.B) {
	const t0 = 1 << 41
	b.Run("fixed-window", func(b *testing.B) {
		p := FixedWindow{Limit: 100, Window: time.Second}
		s := p.Fresh(t0)
		p.Take(&s, t0, 100)
		b.ReportAllocs()
		for i := range b.N {
			r, pr := p.Peek(s, t0+int64(i&511))
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs + pr.Count + pr.Tokens + pr.Level
		}
	})
	b.Run("sliding-log", func(b *testing.B) {
		p := SlidingLog{Limit: 100, Window: time.Second}
		s := p.Fresh(t0)
		for i := range int64(100) {
			p.Take(&s, t0+i, 1)
		}
		b.ReportAllocs()
		for i := range b.N {
			r, pr := p.Peek(s, t0+100+int64(i&511))
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs + pr.Count + pr.Tokens + pr.Level
		}
	})
	b.Run("token-bucket", func(b *testing.B) {
		p := TokenBucket{Rate: 100, Burst: 100}
		s := p.Fresh(t0)
		p.Take(&s, t0, 100)
		b.ReportAllocs()
		for i := range b.N {
			r, pr := p.Peek(s, t0+int64(i&7))
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs + pr.Count + pr.Tokens + pr.Level
		}
	})
	b.Run("gcra", func(b *testing.B) {
		p := GCRA{Rate: 100, Burst: 100}
		s := p.Fresh(t0)
		p.Take(&s, t0, 100)
		b.ReportAllocs()
		for i := range b.N {
			r, pr := p.Peek(s, t0+int64(i&7))
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs + pr.Count + pr.Tokens + pr.Level
		}
	})
	b.Run("leaky-bucket", func(b *testing.B) {
		p := LeakyBucket{Rate: 100, Capacity: 100}
		s := p.Fresh(t0)
		p.Take(&s, t0, 100)
		b.ReportAllocs()
		for i := range b.N {
			r, pr := p.Peek(s, t0+int64(i&7))
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs + pr.Count + pr.Tokens + pr.Level
		}
	})
	b.Run("dual-bucket", func(b *testing.B) {
		p := DualBucket{RequestsPerMin: 6000, TokensPerMin: 6000}
		s := p.Fresh(t0)
		p.Take(&s, t0, 6000)
		b.ReportAllocs()
		for i := range b.N {
			r, pr := p.Peek(s, t0+int64(i&7))
			sinkSum += r.Remaining + r.RetryAfterMs + r.ResetAtMs + pr.Count + pr.Tokens + pr.Level
		}
	})
}

func TestBucketRate(t *testing.T) {
	for _, c := range []struct {
		p    policy.Policy
		want int64
	}{
		{policy.TokenBucket{Rate: 5, Burst: 10}, 5},
		{&policy.GCRA{Rate: 7, Burst: 1}, 7}, // through a pointer
		{policy.LeakyBucket{Rate: 3, Capacity: 9}, 3},
		{policy.SlidingCounter{Limit: 10, Window: time.Second}, 0},
		{policy.DualBucket{RequestsPerMin: 1, TokensPerMin: 1}, 0},
		{nil, 0},
	} {
		if got := BucketRate(c.p); got != c.want {
			t.Errorf("BucketRate(%#v) = %d, want %d", c.p, got, c.want)
		}
	}
}

// TestFullSooner: units given back to a bucket move the time it is full again back by their
// refill, units×1000/rate ms, never before now; without a reset, units or a rate, nothing moves.
func TestFullSooner(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	at := now.Add(4 * time.Second)
	for _, c := range []struct {
		units, rate int64
		at, want    time.Time
	}{
		{1, 2, at, now.Add(3500 * time.Millisecond)}, // one unit at 2 a second: 500 ms
		{3, 3, at, now.Add(3 * time.Second)},
		{1, 3, at, now.Add(4*time.Second - 333333333)}, // a third of a second, to the nanosecond
		{100, 1, at, now},                              // never before now
		{0, 2, at, at},
		{1, 0, at, at}, // a window: its reset does not move
		{1, 2, time.Time{}, time.Time{}},
	} {
		if got := FullSooner(c.at, c.units, c.rate, now); !got.Equal(c.want) {
			t.Errorf("FullSooner(%v, %d, %d) = %v, want %v", c.at.Sub(now), c.units, c.rate, got.Sub(now), c.want.Sub(now))
		}
	}
}
