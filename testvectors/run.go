package testvectors

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/reference"
	"github.com/slidelimit/slidelimit/policy"
)

// target is what a case runs against: the engine or the reference model, fresh per case.
type target interface {
	allow(key, cost, now int64) bool
	retryAfter(key, now int64) int64
	probe(call string, key, now int64) int64
	stateSize() int64
	close()
}

// Run replays every case of f through the real engine: engine.New with the case's policy, a
// manual clock set to each step's now before the call, and eviction off (keys are never
// forgotten, as the registry's stateSize assumes). It writes one line per failing step to w,
// naming the file, case, step index, call, arguments, expected and observed results, and returns
// the numbers of passing and failing steps. A policy the engine refuses (engine.New returns an
// error) or a panic inside the engine fails the rest of the case's steps, each with the reason.
// err is set, and nothing runs, when f does not pass Check (an unknown policy id or call, …).
// Each case gets its own limiter and clock, so concurrent Runs do not interfere; w must then be
// safe for concurrent writes.
func Run(f *File, w io.Writer) (passed, failed int, err error) {
	return run(f, w, newEngineTarget)
}

// RunReference is Run against the reference model (internal/reference) instead of the engine.
// The files under testvectors/data were generated from it and must always pass.
// Like Run, it is safe to call concurrently, given a w that is.
func RunReference(f *File, w io.Writer) (passed, failed int, err error) {
	return run(f, w, newModelTarget)
}

func run(f *File, w io.Writer, newTarget func(id string, params map[string]int64) (target, error)) (passed, failed int, err error) {
	if err := f.Check(); err != nil {
		return 0, 0, err
	}
	name := f.Path
	if name == "" {
		name = "(vector file)"
	}
	for _, c := range f.Cases {
		p, n := runCase(name, f.ID(), c, w, newTarget)
		passed += p
		failed += n
	}
	return passed, failed, nil
}

// runCase runs one case on a fresh target. A panic fails the step it happened in and every later
// step of the case, with the panic as the reason, and the next case still runs.
func runCase(file, id string, c Case, w io.Writer, newTarget func(string, map[string]int64) (target, error)) (passed, failed int) {
	line := func(si int, got string) {
		s := c.Steps[si]
		fmt.Fprintf(w, "%s: case %q step %d: %s: expected %s, got %s\n", file, c.Name, si, s, s.Expect, got)
		failed++
	}
	si := 0
	failRest := func(reason string) {
		for ; si < len(c.Steps); si++ {
			line(si, reason)
		}
	}
	var t target
	defer func() {
		if r := recover(); r != nil {
			failRest(fmt.Sprintf("no result (panic: %v)", r))
		}
		if t != nil {
			func() {
				defer func() { _ = recover() }() // a panicking Close must not hide the results
				t.close()
			}()
		}
	}()
	t, err := newTarget(id, c.Params)
	if err != nil {
		failRest(fmt.Sprintf("no result (%v)", err))
		return passed, failed
	}
	for ; si < len(c.Steps); si++ {
		s := c.Steps[si]
		var got Value
		switch s.Call {
		case CallAllow:
			got = Bool(t.allow(s.Args[0], s.Args[1], s.Args[2]))
		case CallRetryAfter:
			got = Int(t.retryAfter(s.Args[0], s.Args[1]))
		case CallStateSize:
			got = Int(t.stateSize())
		default: // a probe: Check has made sure the policy answers it
			got = Int(t.probe(s.Call, s.Args[0], s.Args[1]))
		}
		if got == s.Expect {
			passed++
		} else {
			line(si, got.String())
		}
	}
	return passed, failed
}

// PolicyFor returns the engine's policy value for a registry policy id and its integer params:
// the window policies' windowMs becomes a time.Duration of that many milliseconds. It returns an
// error naming an unknown id or a missing or out-of-range param (the registry's ranges; the
// policy's own Validate may be narrower, as SlidingLog's limit is). It is a pure function, safe
// for concurrent use.
func PolicyFor(id string, params map[string]int64) (policy.Policy, error) {
	if _, err := reference.New(id, params); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "reference: "))
	}
	window := time.Duration(params["windowMs"]) * time.Millisecond
	switch id {
	case reference.SlidingCounter:
		return policy.SlidingCounter{Limit: params["limit"], Window: window}, nil
	case reference.SlidingLog:
		return policy.SlidingLog{Limit: params["limit"], Window: window}, nil
	case reference.FixedWindow:
		return policy.FixedWindow{Limit: params["limit"], Window: window}, nil
	case reference.TokenBucket:
		return policy.TokenBucket{Rate: params["ratePerSec"], Burst: params["burst"]}, nil
	case reference.GCRA:
		return policy.GCRA{Rate: params["ratePerSec"], Burst: params["burst"]}, nil
	case reference.LeakyBucket:
		return policy.LeakyBucket{Rate: params["ratePerSec"], Capacity: params["capacity"]}, nil
	case reference.DualBucket:
		return policy.DualBucket{RequestsPerMin: params["requestsPerMin"], TokensPerMin: params["tokensPerMin"]}, nil
	}
	return nil, fmt.Errorf("testvectors: no engine policy for id %q", id) // reference.New knows an id this switch does not
}

// engineTarget drives a Limiter through its integer-key API under a manual clock.
type engineTarget struct {
	clk *clock.Clock
	lim *engine.Limiter
}

func newEngineTarget(id string, params map[string]int64) (target, error) {
	p, err := PolicyFor(id, params)
	if err != nil {
		return nil, err
	}
	clk := clock.NewManual(0)
	lim, err := engine.New(p, engine.WithClock(clk), engine.WithEviction(false))
	if err != nil {
		return nil, fmt.Errorf("engine.New: %w", err)
	}
	return &engineTarget{clk: clk, lim: lim}, nil
}

func (e *engineTarget) allow(key, cost, now int64) bool {
	e.clk.Set(now)
	return e.lim.TakeKey(uint64(key), cost).Allowed
}

func (e *engineTarget) retryAfter(key, now int64) int64 {
	e.clk.Set(now)
	return int64(e.lim.PeekKey(uint64(key)).RetryAfter / time.Millisecond)
}

func (e *engineTarget) probe(call string, key, now int64) int64 {
	e.clk.Set(now)
	p, _ := e.lim.InspectKey(uint64(key))
	switch call {
	case reference.CallEstimateOf:
		return p.Estimate
	case reference.CallCountOf:
		return p.Count
	case reference.CallTokensOf:
		return p.Tokens
	case reference.CallLevelOf:
		return p.Level
	default: // reference.CallRequestsOf: Check allows no other
		return p.Requests
	}
}

func (e *engineTarget) stateSize() int64 { return int64(e.lim.Len()) }

func (e *engineTarget) close() { _ = e.lim.Close() }

// modelTarget drives the reference model.
type modelTarget struct{ m *reference.Model }

func newModelTarget(id string, params map[string]int64) (target, error) {
	m, err := reference.New(id, params)
	if err != nil {
		return nil, err
	}
	return modelTarget{m}, nil
}

func (t modelTarget) allow(key, cost, now int64) bool { return t.m.Allow(key, cost, now) }
func (t modelTarget) retryAfter(key, now int64) int64 { return t.m.RetryAfter(key, now) }
func (t modelTarget) stateSize() int64                { return int64(t.m.StateSize()) }
func (t modelTarget) close()                          {}

func (t modelTarget) probe(call string, key, now int64) int64 {
	v, err := t.m.Probe(call, key, now)
	if err != nil {
		panic(err) // Check has made sure the policy answers call
	}
	return v
}
