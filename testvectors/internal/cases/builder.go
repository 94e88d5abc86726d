// Package cases defines the calls of every vector file under testvectors/data and computes their
// expectations with the reference model (internal/reference), never with the engine.
//
// A case is written with a small builder: each call is run on a live model as it is added, so
// the model's answer becomes the expectation. A call written with an expectation of its own
// (worked out by hand, the arithmetic in a comment beside it) is checked against the model, and
// any disagreement makes Build fail, naming the file, case and step. Random-walk cases draw their
// calls from the registry's seeded generator (xoshiro128**, see rng.go).
//
// Nothing here is safe for concurrent use, and nothing needs to be: Build runs once per command.
package cases

import (
	"errors"
	"fmt"
	"strings"

	"github.com/slidelimit/slidelimit/internal/reference"
	"github.com/slidelimit/slidelimit/testvectors"
)

// MinCases is the number of cases each file must hold at least.
var MinCases = map[string]int{
	reference.SlidingCounter: 60,
	reference.SlidingLog:     20,
	reference.FixedWindow:    20,
	reference.TokenBucket:    20,
	reference.GCRA:           20,
	reference.LeakyBucket:    20,
	reference.DualBucket:     20,
}

// Times used across the files, all above 2^31 ms.
const (
	// T is 2023-11-14T22:13:20Z, a multiple of 1000 and of 100 ms.
	T int64 = 1_700_000_000_000
	// Month is a window of 30 days.
	Month int64 = 2_592_000_000
	// TMonth is the start of a 30-day window (656 * Month), a little after T.
	TMonth int64 = 656 * Month
	// MaxCount is the largest limit, rate, burst or capacity (2^32-1).
	MaxCount int64 = 1<<32 - 1
	// MaxWindow is the longest window (2^32 ms).
	MaxWindow int64 = 1 << 32
	// TMaxWindow is the start of a 2^32 ms window (396 * 2^32), a little after T.
	TMaxWindow int64 = 396 * MaxWindow
	// Huge is a cost far above every limit.
	Huge int64 = 1 << 62
)

// set collects the cases of one file.
type set struct {
	id    string
	cases []*builder
	errs  *[]error
}

// builder is one case under construction, with the model that answers its calls.
type builder struct {
	set     *set
	c       testvectors.Case
	m       *reference.Model
	lastNow int64
}

func newSet(id string, errs *[]error) *set { return &set{id: id, errs: errs} }

// add starts a case named name (kebab-case, saying what it pins) with params; seed 1 marks a
// case written by hand.
func (s *set) add(name string, params map[string]int64) *builder {
	return s.addSeeded(name, params, 1)
}

func (s *set) addSeeded(name string, params map[string]int64, seed int64) *builder {
	m, err := reference.New(s.id, params)
	if err != nil {
		s.fail("case %q: %v", name, err)
	}
	b := &builder{set: s, c: testvectors.Case{Name: name, Params: params, Seed: seed}, m: m, lastNow: -1}
	s.cases = append(s.cases, b)
	return b
}

func (s *set) fail(format string, args ...any) {
	*s.errs = append(*s.errs, fmt.Errorf("%s: "+format, append([]any{s.id}, args...)...))
}

// step runs one call on the model, records it with the model's answer, and checks a hand-worked
// expectation if one was given.
func (b *builder) step(call string, args []int64, hand *testvectors.Value) testvectors.Value {
	if len(args) > 0 {
		now := args[len(args)-1]
		if now < b.lastNow {
			b.set.fail("case %q step %d: time goes back from %d to %d", b.c.Name, len(b.c.Steps), b.lastNow, now)
		}
		b.lastNow = now
	}
	var got testvectors.Value
	if b.m != nil {
		switch call {
		case testvectors.CallAllow:
			got = testvectors.Bool(b.m.Allow(args[0], args[1], args[2]))
		case testvectors.CallRetryAfter:
			got = testvectors.Int(b.m.RetryAfter(args[0], args[1]))
		case testvectors.CallStateSize:
			got = testvectors.Int(int64(b.m.StateSize()))
		default:
			v, err := b.m.Probe(call, args[0], args[1])
			if err != nil {
				b.set.fail("case %q step %d: %v", b.c.Name, len(b.c.Steps), err)
			}
			got = testvectors.Int(v)
		}
	}
	s := testvectors.Step{Call: call, Args: args, Expect: got}
	if hand != nil && *hand != got {
		b.set.fail("case %q step %d: %s: hand-worked expectation %s, but the reference model says %s",
			b.c.Name, len(b.c.Steps), s, hand, got)
	}
	b.c.Steps = append(b.c.Steps, s)
	return got
}

// allow adds allow(key, cost, now); want, if given, is the hand-worked result.
func (b *builder) allow(key, cost, now int64, want ...bool) *builder {
	var hand *testvectors.Value
	if len(want) > 0 {
		v := testvectors.Bool(want[0])
		hand = &v
	}
	b.step(testvectors.CallAllow, []int64{key, cost, now}, hand)
	return b
}

// retry adds retryAfter(key, now); want, if given, is the hand-worked result.
func (b *builder) retry(key, now int64, want ...int64) *builder {
	b.step(testvectors.CallRetryAfter, []int64{key, now}, handInt(want))
	return b
}

// probe adds one of the policy's probe calls.
func (b *builder) probe(call string, key, now int64, want ...int64) *builder {
	b.step(call, []int64{key, now}, handInt(want))
	return b
}

// size adds stateSize().
func (b *builder) size(want ...int64) *builder {
	b.step(testvectors.CallStateSize, []int64{}, handInt(want))
	return b
}

func handInt(want []int64) *testvectors.Value {
	if len(want) == 0 {
		return nil
	}
	v := testvectors.Int(want[0])
	return &v
}

// honour adds retryAfter(key, now) and then, where it is positive, a unit allow 1 ms early,
// which must be refused, and one at exactly now + retryAfter, which must be admitted (where it
// is 0, an allow at now, which must be admitted). Build fails if the model breaks either rule, so
// every such case pins "the wait is exact" for the policy.
func (b *builder) honour(key, now int64) *builder {
	r := b.step(testvectors.CallRetryAfter, []int64{key, now}, nil).Int
	if r > 0 {
		no := testvectors.Bool(false)
		b.step(testvectors.CallAllow, []int64{key, 1, now + r - 1}, &no)
	}
	yes := testvectors.Bool(true)
	b.step(testvectors.CallAllow, []int64{key, 1, now + r}, &yes)
	return b
}

// file turns the set into a vector file, after checking the number of cases.
func (s *set) file() *testvectors.File {
	f := &testvectors.File{Path: "testvectors/data/" + s.id + ".json", Policy: testvectors.PolicyPrefix + s.id, Version: testvectors.Version}
	seen := map[string]bool{}
	for _, b := range s.cases {
		if seen[b.c.Name] {
			s.fail("two cases named %q", b.c.Name)
		}
		seen[b.c.Name] = true
		f.Cases = append(f.Cases, b.c)
	}
	if len(f.Cases) < MinCases[s.id] {
		s.fail("%d cases, want at least %d", len(f.Cases), MinCases[s.id])
	}
	return f
}

// Build returns every vector file, its expectations computed by the reference model, or an error
// listing every hand-worked expectation the model disagrees with (and any other mistake in the
// definitions). File.Path is "testvectors/data/<id>.json".
func Build() ([]*testvectors.File, error) {
	var errs []error
	var files []*testvectors.File
	for _, def := range []struct {
		id    string
		build func(*set)
	}{
		{reference.SlidingCounter, slidingCounter},
		{reference.SlidingLog, slidingLog},
		{reference.FixedWindow, fixedWindow},
		{reference.TokenBucket, tokenBucket},
		{reference.GCRA, gcra},
		{reference.LeakyBucket, leakyBucket},
		{reference.DualBucket, dualBucket},
	} {
		s := newSet(def.id, &errs)
		def.build(s)
		f := s.file()
		if err := f.Check(); err != nil {
			errs = append(errs, err)
		}
		files = append(files, f)
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.TrimSpace(errors.Join(errs...).Error()))
	}
	return files, nil
}
