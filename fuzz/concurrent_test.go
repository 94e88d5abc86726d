package fuzz

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/reference"
)

// The concurrent targets: requests decoded from the input are issued by K goroutines (2 to 8) at
// one frozen instant, after a serial prefix that gives the keys some history.
//
// What is checked, and why it is sound. At a fixed instant every policy decides a key's requests
// against a budget: the request is admitted iff its demand fits what is left, and then its demand
// is subtracted (the window policies: cost against limit - estimate or count; the token bucket and
// GCRA: cost thousandths against the tokens or the burst less the lag; the leaky bucket: cost
// against capacity - level; the dual bucket: a pair, one request and cost tokens, both of which
// must fit). Costs are not refunded and time does not move, so nothing else changes the budget.
// The engine is linearizable per key (a CAS loop over one cell), so its outcome is the outcome of
// some serial order of the requests. For a budget that gives this exact test: an observed outcome
// (each request admitted or refused) is produced by some serial order iff it is produced by the
// order "every admitted request, then every refused one". Only if: in any order the admitted ones
// together fit the budget, so they fit when they come first; and a refused request saw at least
// the budget less everything admitted, so it is also refused after all of them. If: that order
// is itself a serial order. So the check replays, per key, the admitted requests and then the
// refused ones through the reference model from the state the serial prefix left, and requires
// the model to make the same decision on every one. That catches over-admission (the admitted
// ones overflow the budget), lost updates, and refusals that no order explains. Afterwards the
// key's state, which depends only on the admitted total, must read the same on both sides.
//
// The plainer form of the same check: where all of a key's requests have one cost, every serial order
// admits the same number (the budget divided by the cost, or all of them), so the total admitted
// must equal that of a serial run in the requests' input order through a second model.
//
// Input: flags seed count(p1) count(p2) start n prefix-op{n} step request*
// flags: bit 0 eviction; bits 1-3 log2 shards; bit 4 all costs 1; bits 5-7 K-2 (mod 7)
// prefix-op: head step cost (an allow, key from head bits 3-5)
// request: head [cost]: key from head bits 3-5; head%8 == 4 is a Peek (checked for sanity only),
// anything else a Take; request i goes to goroutine i mod K.

func FuzzConcurrentSlidingCounter(f *testing.F) { fuzzConcurrent(f, slidingCounter) }
func FuzzConcurrentSlidingLog(f *testing.F)     { fuzzConcurrent(f, slidingLog) }
func FuzzConcurrentFixedWindow(f *testing.F)    { fuzzConcurrent(f, fixedWindow) }
func FuzzConcurrentTokenBucket(f *testing.F)    { fuzzConcurrent(f, tokenBucket) }
func FuzzConcurrentGCRA(f *testing.F)           { fuzzConcurrent(f, gcra) }
func FuzzConcurrentLeakyBucket(f *testing.F)    { fuzzConcurrent(f, leakyBucket) }
func FuzzConcurrentDualBucket(f *testing.F)     { fuzzConcurrent(f, dualBucket) }

func fuzzConcurrent(f *testing.F, tg *target) {
	requireSupported(f, tg)
	f.Fuzz(func(t *testing.T, data []byte) { runConcurrent(t, tg, data, nil) })
}

// concurrentFeatures records what a concurrent input reached, for TestSeedsCoverRules.
type concurrentFeatures struct {
	contended bool // a key had requests both admitted and refused in the concurrent phase
	totals    bool // a key's requests all had one cost, so the serial total was compared
	eviction  bool
	peeks     bool
}

// maxRequests bounds the requests of the concurrent phase.
const maxRequests = 256

type request struct {
	key  int64
	cost int64
	peek bool
	d    engine.Decision // what the engine decided
}

func runConcurrent(t testing.TB, tg *target, data []byte, cf *concurrentFeatures) {
	rd := &reader{b: data}
	flags := rd.u8()
	unit := flags&0x10 != 0
	k := 2 + int(flags>>5)%7
	r := newRun(t, tg, rd, flags&1 != 0, 1<<((flags>>1)&7))
	defer func() { _ = r.lim.Close() }()
	defer r.watchdog().Stop() // covers the goroutines too: a livelock among them stops wg.Wait
	period, capacity := tg.period(r.params), tg.capacity(r.params)

	// The serial prefix, compared op by op like the serial targets.
	var prefix []op
	for range rd.u8() % 8 {
		key := keyOf(rd.u8())
		step, _ := rd.step(r.now, period, func() int64 { return r.model.RetryAfter(key, r.now) })
		r.advance(step)
		cost, _ := rd.cost(capacity, func() int64 { return tg.remaining(r.model, r.params, key, r.now) })
		r.allow(key, cost, step)
		prefix = append(prefix, r.ops[len(r.ops)-1])
	}
	step, _ := rd.step(r.now, period, func() int64 { return r.model.RetryAfter(0, r.now) })
	r.advance(step) // the frozen instant
	r.record(op{call: "concurrent", step: step})

	var reqs []request
	for rd.more() && len(reqs) < maxRequests {
		head := rd.u8()
		q := request{key: keyOf(head), cost: 1, peek: head%8 == callRetry}
		if !q.peek && !unit {
			q.cost, _ = rd.cost(capacity, func() int64 { return tg.remaining(r.model, r.params, q.key, r.now) })
		}
		reqs = append(reqs, q)
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := g; i < len(reqs); i += k {
				if reqs[i].peek {
					reqs[i].d = r.lim.PeekKey(uint64(reqs[i].key))
				} else {
					reqs[i].d = r.lim.TakeKey(uint64(reqs[i].key), reqs[i].cost)
				}
			}
		}()
	}
	close(start)
	wg.Wait()

	c := &concurrentCheck{run: r, k: k, reqs: reqs}
	for i, q := range reqs {
		switch {
		case q.peek && (q.d.Remaining < 0 || q.d.Remaining > q.d.Limit):
			c.fail("request %d: Peek reported remaining %d of limit %d", i, q.d.Remaining, q.d.Limit)
		case !q.peek && q.d.Allowed != (q.d.Reason == engine.ReasonOK):
			c.fail("request %d: allowed %v with reason %v", i, q.d.Allowed, q.d.Reason)
		}
	}
	c.replay()
	totals := c.serialTotals(prefix)
	if cf != nil {
		cf.totals = cf.totals || totals
		cf.eviction = cf.eviction || r.evict
		for _, key := range keys {
			var admitted, refused bool
			for _, q := range reqs {
				if !q.peek && q.key == key && q.cost >= 0 {
					admitted, refused = admitted || q.d.Allowed, refused || !q.d.Allowed
				}
				cf.peeks = cf.peeks || q.peek
			}
			cf.contended = cf.contended || admitted && refused
		}
	}

	// The state each key was left in, and the key count, read the same on both sides.
	for _, key := range keys {
		for _, call := range reference.Probes(tg.id) {
			r.probe(call, key, 0)
		}
		r.retryAfter(key, 0)
	}
	r.stateSize(0)
}

type concurrentCheck struct {
	*run
	k    int
	reqs []request
}

// fail reports the prefix, the frozen instant and every request with the engine's outcome.
func (c *concurrentCheck) fail(format string, args ...any) {
	c.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "concurrent run: %s\n  %s, %d goroutines\n  serial prefix:\n%s", fmt.Sprintf(format, args...), c.header(), c.k, c.opList())
	fmt.Fprintf(&b, "  frozen at %d; requests (goroutine = index mod %d):\n", c.now, c.k)
	for i, q := range c.reqs {
		what := fmt.Sprintf("take(key %s, cost %d) -> engine %v", keyName(q.key), q.cost, q.d.Allowed)
		if q.peek {
			what = fmt.Sprintf("peek(key %s) -> engine %v, remaining %d", keyName(q.key), q.d.Allowed, q.d.Remaining)
		}
		fmt.Fprintf(&b, "    [%d] g%d %s\n", i, i%c.k, what)
	}
	c.t.Fatal(b.String())
}

// replay runs each key's admitted requests, then its refused ones, through the model (see the
// comment at the top of the file) and requires the same decisions.
func (c *concurrentCheck) replay() {
	c.t.Helper()
	for _, admitted := range []bool{true, false} {
		for i, q := range c.reqs {
			if q.peek || q.d.Allowed != admitted {
				continue
			}
			size := c.model.StateSize()
			if c.model.Allow(q.key, q.cost, c.now) != admitted {
				c.fail("no serial order gives this outcome: replaying the admitted requests first, then the refused ones, the model decides request %d (key %s, cost %d) the other way",
					i, keyName(q.key), q.cost)
			}
			if c.model.StateSize() > size {
				c.created[q.key] = true
			}
		}
	}
}

// serialTotals runs the requests serially, in input order, through a second model that replays
// the prefix, and compares per key the number admitted where all of the key's requests share one
// cost. It reports whether it compared a key with more than one request.
func (c *concurrentCheck) serialTotals(prefix []op) (compared bool) {
	c.t.Helper()
	m, err := reference.New(c.tg.id, c.tg.paramMap(c.params))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, o := range prefix {
		m.Allow(o.key, o.cost, o.now)
	}
	for _, key := range keys {
		var cost int64
		n, same, serial, concurrent := 0, true, 0, 0
		for _, q := range c.reqs {
			if q.peek || q.key != key {
				continue
			}
			if n > 0 && q.cost != cost {
				same = false
			}
			n, cost = n+1, q.cost
			if m.Allow(key, q.cost, c.now) {
				serial++
			}
			if q.d.Allowed {
				concurrent++
			}
		}
		if same && serial != concurrent {
			c.fail("key %s: %d requests of cost %d each; the engine admitted %d concurrently, a serial run admits %d",
				keyName(key), n, cost, concurrent, serial)
		}
		compared = compared || same && n > 1
	}
	return compared
}

// fatalRecorder is a testing.TB whose Fatal stops the check under test and records that it failed.
type fatalRecorder struct {
	testing.TB
	failed bool
}

type stopped struct{}

// Only what the check calls is overridden; the embedded TB is never asked to fail.
func (f *fatalRecorder) Helper()               {}
func (f *fatalRecorder) Fatal(...any)          { f.failed = true; panic(stopped{}) }
func (f *fatalRecorder) Fatalf(string, ...any) { f.failed = true; panic(stopped{}) }

// TestReplayJudgesOutcomes feeds the concurrent check hand-made outcomes of one key's requests at
// one instant, for a sliding counter of limit 3 with no history, and requires it to accept exactly
// those that some serial order produces.
func TestReplayJudgesOutcomes(t *testing.T) {
	for _, c := range []struct {
		name     string
		costs    []int64
		admitted []bool
		possible bool
	}{
		{"the limit, in any positions", []int64{1, 1, 1, 1, 1}, []bool{false, true, true, false, true}, true},
		{"one over the limit", []int64{1, 1, 1, 1, 1}, []bool{true, true, true, true, false}, false},
		{"a refusal with room left", []int64{1, 1, 1, 1, 1}, []bool{true, true, false, false, false}, false},
		{"2 then 1 fit, the other 2 cannot", []int64{2, 2, 1}, []bool{true, false, true}, true},
		{"2 and 2 never both fit", []int64{2, 2, 1}, []bool{true, true, false}, false},
		{"after the 1, a 2 still fits", []int64{2, 2, 1}, []bool{false, false, true}, false},
		{"cost 0 is never refused", []int64{3, 0}, []bool{true, false}, false},
		{"a cost above the limit never fits", []int64{4, 1}, []bool{true, false}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := reference.New(reference.SlidingCounter, map[string]int64{"limit": 3, "windowMs": 1000})
			if err != nil {
				t.Fatal(err)
			}
			rec := &fatalRecorder{TB: t}
			chk := &concurrentCheck{run: &run{t: rec, tg: slidingCounter, params: [2]int64{3, 1000}, model: m,
				now: epoch, created: map[int64]bool{}}, k: 2}
			for i, cost := range c.costs {
				chk.reqs = append(chk.reqs, request{key: 1, cost: cost, d: engine.Decision{Allowed: c.admitted[i]}})
			}
			func() {
				defer func() {
					if r := recover(); r != nil && r != (stopped{}) {
						panic(r)
					}
				}()
				chk.replay()
			}()
			if rec.failed == c.possible {
				t.Errorf("costs %v admitted %v: the check says possible = %v, want %v", c.costs, c.admitted, !rec.failed, c.possible)
			}
		})
	}
}
