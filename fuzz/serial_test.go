package fuzz

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/reference"
	"github.com/slidelimit/slidelimit/policy"
)

// The serial targets: one op at a time, through the engine and the model, comparing every answer.
func FuzzSlidingCounter(f *testing.F) { fuzzSerial(f, slidingCounter) }
func FuzzSlidingLog(f *testing.F)     { fuzzSerial(f, slidingLog) }
func FuzzFixedWindow(f *testing.F)    { fuzzSerial(f, fixedWindow) }
func FuzzTokenBucket(f *testing.F)    { fuzzSerial(f, tokenBucket) }
func FuzzGCRA(f *testing.F)           { fuzzSerial(f, gcra) }
func FuzzLeakyBucket(f *testing.F)    { fuzzSerial(f, leakyBucket) }
func FuzzDualBucket(f *testing.F)     { fuzzSerial(f, dualBucket) }

func fuzzSerial(f *testing.F, tg *target) {
	requireSupported(f, tg)
	f.Fuzz(func(t *testing.T, data []byte) { runSerial(t, tg, data, nil) })
}

// requireSupported fails a target whose policy engine.New refuses: every policy is supported, so
// a refusal is a regression, which a skip would hide.
func requireSupported(tb testing.TB, tg *target) {
	tb.Helper()
	p, err := tg.enginePolicy([2]int64{10, 1000})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := engine.New(p, engine.WithClock(clock.NewManual(0)), engine.WithEviction(false))
	if err != nil {
		tb.Fatalf("engine.New(%#v) = %v: the engine must accept every policy", p, err)
	}
	_ = l.Close()
}

// features records which rules an input reached, for TestSeedsCoverRules.
type features struct {
	steps    [numSteps]bool
	costs    [numCosts]bool
	admitted bool
	refused  bool
	eviction bool
	noEvict  bool    // a run with eviction off
	forgot   bool    // with eviction on, Len was seen below the model's key count
	minParam [2]bool // each parameter at 1
	maxParam [2]bool // each parameter at its maximum
	calls    map[string]bool
}

// run is one execution: the engine and the model side by side, and the ops so far for the report.
type run struct {
	t        testing.TB
	tg       *target
	params   [2]int64
	model    *reference.Model
	lim      *engine.Limiter
	clk      *clock.Clock
	evict    bool
	shards   int
	seed     byte
	t0       int64
	now      int64
	created  map[int64]bool // keys the model holds (it never forgets)
	forgot   bool           // Len was seen below the model's count: the engine did evict
	ops      []op
	newProbe map[string]int64 // each probe's value for a new key
}

func (r *run) header() string {
	return fmt.Sprintf("%s %s=%d %s=%d, %d shards, eviction %v, seed %d, t0 %d",
		r.tg.id, r.tg.params[0], r.params[0], r.tg.params[1], r.params[1], r.shards, r.evict, r.seed, r.t0)
}

func (r *run) opList() string {
	var b strings.Builder
	for i, o := range r.ops {
		fmt.Fprintf(&b, "    #%d %v\n", i, o)
	}
	return b.String()
}

// fail reports the input decoded into operations, ending with the one that disagreed.
func (r *run) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("engine and model disagree: %s\n  %s\n  ops:\n%s", fmt.Sprintf(format, args...), r.header(), r.opList())
}

// hangLimit bounds one execution, which normally takes well under a millisecond. It guards
// liveness, not speed: an engine call that never returns (a CAS loop that can never succeed)
// then crashes the test binary with the ops decoded so far, the last one being the call that
// hung, instead of leaving `go test` to time out ten minutes later with no input to show.
const hangLimit = 20 * time.Second

// watchdog arms the hang guard for one execution; the caller stops it when the execution ends.
func (r *run) watchdog() *time.Timer {
	return time.AfterFunc(hangLimit, func() {
		// The ops are read without synchronisation, but only once the execution is stuck.
		panic(fmt.Sprintf("an engine call has not returned for %v\n  %s\n  ops (the last one hangs):\n%s", hangLimit, r.header(), r.opList()))
	})
}

// newRun decodes the header and builds both sides. It fails the test if the engine refuses a
// policy the reference accepts: the decoder only makes valid parameters.
func newRun(t testing.TB, tg *target, rd *reader, evict bool, shards int) *run {
	r := &run{t: t, tg: tg, evict: evict, shards: shards, created: map[int64]bool{}}
	r.seed = rd.u8()
	r.params = [2]int64{rd.count(tg.hi[0]), rd.count(tg.hi[1])}
	r.t0 = rd.start(tg.period(r.params))
	r.now = r.t0
	var err error
	if r.model, err = reference.New(tg.id, tg.paramMap(r.params)); err != nil {
		t.Fatalf("reference.New: %v", err)
	}
	p, err := tg.enginePolicy(r.params)
	if err != nil {
		t.Fatal(err)
	}
	r.clk = clock.NewManual(r.t0)
	opts := []engine.Option{engine.WithClock(r.clk), engine.WithEviction(evict), engine.WithShards(shards),
		engine.WithSeed(uint64(r.seed))}
	if evict {
		// The background sweeper never ticks within an execution: eviction happens only on the
		// engine's synchronous paths (an overdue shard swept before a decision, rebuilds on
		// insert), so a run is deterministic.
		opts = append(opts, engine.WithSweepInterval(time.Hour))
	}
	if r.lim, err = engine.New(p, opts...); err != nil {
		t.Fatalf("engine.New(%#v): %v (%s)", p, err, r.header())
	}
	r.newProbe = map[string]int64{}
	for _, call := range reference.Probes(tg.id) {
		r.newProbe[call] = probe(r.model, call, 1<<40, r.t0) // a key no op names: reports a new key's value
	}
	return r
}

// advance moves both clocks forward by d.
func (r *run) advance(d int64) {
	r.now += d
	r.clk.Set(r.now)
}

func (r *run) record(o op) *op {
	o.now = r.now
	r.ops = append(r.ops, o)
	return &r.ops[len(r.ops)-1]
}

// allow decides one request on both sides and compares the decision and what the Decision says
// about itself (reason, retry-after, remaining), as engine.Decision documents them.
func (r *run) allow(key, cost, step int64) bool {
	r.t.Helper()
	o := r.record(op{call: "allow", key: key, cost: cost, step: step})
	size := r.model.StateSize()
	want := r.model.Allow(key, cost, r.now)
	if r.model.StateSize() > size {
		r.created[key] = true
	}
	o.want = fmt.Sprint(want)
	d := r.lim.TakeKey(uint64(key), cost)
	if d.Allowed != want {
		r.fail("allow: engine %v (%+v)", d.Allowed, d)
	}
	r.checkDecision(d, key, cost)
	return want
}

func (r *run) checkDecision(d engine.Decision, key, cost int64) {
	r.t.Helper()
	switch {
	case cost < 0:
		if d.Reason != engine.ReasonNegativeCost {
			r.fail("a negative cost gave reason %v, want %v", d.Reason, engine.ReasonNegativeCost)
		}
	case d.Allowed:
		if d.Reason != engine.ReasonOK || d.RetryAfter != 0 {
			r.fail("an admitted request gave reason %v, retry-after %v; want ok, 0", d.Reason, d.RetryAfter)
		}
	case d.Reason != engine.ReasonLimited && d.Reason != engine.ReasonCostAboveLimit:
		r.fail("a refused request gave reason %v", d.Reason)
	case cost > r.tg.capacity(r.params):
		if d.RetryAfter != 0 {
			r.fail("a cost that can never be admitted gave retry-after %v, want 0", d.RetryAfter)
		}
	case cost == 1:
		// A refused unit request waits exactly as long as retryAfter says (which answers for a
		// unit request); the refusal changed nothing, so asking the model now is the same.
		if want := r.model.RetryAfter(key, r.now); int64(d.RetryAfter/time.Millisecond) != want || d.RetryAfter%time.Millisecond != 0 {
			r.fail("a refused unit request gave retry-after %v, model's retryAfter %d ms", d.RetryAfter, want)
		}
	}
	if d.Remaining < 0 {
		r.fail("remaining %d < 0", d.Remaining)
	}
}

// retryAfter compares the unit retry-after (Peek), and that Peek admits exactly when it is 0.
func (r *run) retryAfter(key, step int64) {
	r.t.Helper()
	o := r.record(op{call: "retryAfter", key: key, step: step})
	want := r.model.RetryAfter(key, r.now)
	o.want = fmt.Sprint(want)
	d := r.lim.PeekKey(uint64(key))
	if got := int64(d.RetryAfter / time.Millisecond); got != want || d.RetryAfter%time.Millisecond != 0 {
		r.fail("retryAfter: engine %v", d.RetryAfter)
	}
	// Every policy's retryAfter is 0 exactly when a unit request would be admitted now.
	if d.Allowed != (want == 0) {
		r.fail("Peek: allowed %v with retry-after %d ms", d.Allowed, want)
	}
}

func probeField(p policy.Probe, call string) int64 {
	switch call {
	case reference.CallEstimateOf:
		return p.Estimate
	case reference.CallCountOf:
		return p.Count
	case reference.CallTokensOf:
		return p.Tokens
	case reference.CallLevelOf:
		return p.Level
	case reference.CallRequestsOf:
		return p.Requests
	}
	panic("fuzz: unknown probe " + call)
}

func (r *run) probe(call string, key, step int64) {
	r.t.Helper()
	o := r.record(op{call: call, key: key, step: step})
	want := probe(r.model, call, key, r.now)
	o.want = fmt.Sprint(want)
	p, tracked := r.lim.InspectKey(uint64(key))
	if got := probeField(p, call); got != want {
		r.fail("%s: engine %d", call, got)
	}
	// Eviction off: a key is tracked exactly when the model holds it. On: the engine may have
	// forgotten a key, never invented one.
	if tracked && !r.created[key] || !r.evict && tracked != r.created[key] {
		r.fail("%s: engine says tracked = %v, model holds the key: %v", call, tracked, r.created[key])
	}
}

// live counts the keys whose state differs from a new key's: some probe reports a value a new key
// would not. For every policy the converse holds too (a state whose probes all read as new, with
// time never going back, decides every later request as a new key would), so these are exactly the
// keys the engine must not have forgotten.
func (r *run) live() int {
	n := 0
	for _, k := range keys {
		for _, call := range reference.Probes(r.tg.id) {
			if probe(r.model, call, k, r.now) != r.newProbe[call] {
				n++
				break
			}
		}
	}
	return n
}

// stateSize compares Len: equal to the model's count with eviction off; with eviction on, between
// the keys the engine must still hold and the keys it ever held.
func (r *run) stateSize(step int64) {
	r.t.Helper()
	o := r.record(op{call: "stateSize", step: step})
	want := r.model.StateSize()
	o.want = fmt.Sprint(want)
	got := r.lim.Len()
	if !r.evict {
		if got != want {
			r.fail("stateSize: engine %d", got)
		}
		return
	}
	if live := r.live(); got < live || got > want {
		r.fail("stateSize with eviction: engine %d, want %d live keys <= Len <= %d ever created", got, live, want)
	}
	r.forgot = r.forgot || got < want
}

// runSerial decodes data (format: decode_test.go) and runs it through both sides.
func runSerial(t testing.TB, tg *target, data []byte, ft *features) {
	rd := &reader{b: data}
	flags := rd.u8()
	r := newRun(t, tg, rd, flags&1 != 0, 1<<((flags>>1)&7))
	defer func() { _ = r.lim.Close() }()
	defer r.watchdog().Stop()
	if ft != nil {
		ft.eviction = ft.eviction || r.evict
		ft.noEvict = ft.noEvict || !r.evict
		for i := range ft.minParam {
			ft.minParam[i] = ft.minParam[i] || r.params[i] == 1
			ft.maxParam[i] = ft.maxParam[i] || r.params[i] == tg.hi[i]
		}
	}
	period := tg.period(r.params)
	probes := reference.Probes(tg.id)
	for n := 0; rd.more() && n < maxOps; n++ {
		head := rd.u8()
		key := keyOf(head)
		step, sc := rd.step(r.now, period, func() int64 { return r.model.RetryAfter(key, r.now) })
		r.advance(step)
		if ft != nil {
			ft.steps[sc] = true
		}
		switch head % 8 {
		case callRetry:
			r.retryAfter(key, step)
		case callProbe:
			r.probe(probes[int(head>>6)%len(probes)], key, step)
		case callSize:
			r.stateSize(step)
		default:
			cost, cc := rd.cost(tg.capacity(r.params), func() int64 { return tg.remaining(r.model, r.params, key, r.now) })
			ok := r.allow(key, cost, step)
			if ft != nil {
				ft.costs[cc] = true
				ft.admitted = ft.admitted || ok
				ft.refused = ft.refused || !ok
			}
		}
		if ft != nil {
			if ft.calls == nil {
				ft.calls = map[string]bool{}
			}
			ft.calls[r.ops[len(r.ops)-1].call] = true
		}
	}
	r.stateSize(0) // every execution ends by comparing the key count
	if ft != nil {
		ft.forgot = ft.forgot || r.forgot
	}
}
