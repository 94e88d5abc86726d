// Package reference is a plain, deliberately unoptimised model of every policy that slidelimit
// implements, written straight from the text of docs/policies.md. It is the oracle that
// the vector generator, the vector tests and the differential fuzz targets compare the engine
// against, so it imports nothing from the engine or policy packages and favours the obvious over
// the fast: one Go map per model, arbitrary-precision products (math/big) wherever a product could
// leave int64, and a sliding log kept as runs of equal timestamps rather than a packed ring.
//
// # Ranges
//
// New accepts every count parameter (limit, ratePerSec, burst, capacity, requestsPerMin,
// tokensPerMin) in [1, 2^32-1] and windowMs in [1, 2^32]. Within those ranges every result is
// exact for any time 0 <= now <= MaxNow = 2^62-1 ms and any cost 0 <= cost < 2^62 (costs are compared by
// subtraction, so even a larger cost is refused correctly). The products that could overflow int64
// (the sliding counter's previous*(W-elapsed) and W*excess, and GCRA's now*ratePerSec, which
// reaches 2^94 at the extremes) are computed with math/big.
//
// A time outside [0, MaxNow] is the caller's error (the engine's clock never reads one, and the
// vector loader rejects one): Probe returns an error naming it, and Allow and RetryAfter, which
// return no error, panic with that error rather than answer for a time no engine can decide at.
//
// Times are expected not to go backwards for a key, as the engine's clock never does. Where they
// do, the model follows the specification text literally (for the window policies a step back
// into an earlier window is "a different window": the sliding counter then clears its previous
// count and the fixed window its count); vectors never rely on that.
//
// A negative cost is refused before the key is looked up: it creates nothing and consumes nothing
// (docs/policies.md ("Rules every policy shares") says only that it is refused and consumes
// nothing).
//
// Keys are never forgotten, as in the registry: StateSize counts every key ever created.
//
// A Model is not safe for concurrent use: callers that share one between goroutines must
// serialise every call, including the read-only looking ones (probes bring state up to now).
package reference

import (
	"fmt"
	"math/big"
	"slices"
	"strings"
)

// MaxCount is the largest count parameter New accepts (limits, rates, bursts, capacities).
const MaxCount = 1<<32 - 1

// MaxWindowMs is the largest windowMs New accepts (about 49.7 days).
const MaxWindowMs = 1 << 32

// MaxNow is the latest time (ms) the model decides at: 2^62-1, as the engine's clock.MaxMs.
const MaxNow = 1<<62 - 1

// CheckTime returns an error naming now when it is outside [0, MaxNow], and nil otherwise.
func CheckTime(now int64) error {
	if now < 0 || now > MaxNow {
		return fmt.Errorf("reference: now = %d out of range [0, %d]", now, int64(MaxNow))
	}
	return nil
}

func mustTime(now int64) {
	if err := CheckTime(now); err != nil {
		panic(err)
	}
}

// Probe call names, as the vector files spell them.
const (
	CallEstimateOf = "estimateOf"
	CallCountOf    = "countOf"
	CallTokensOf   = "tokensOf"
	CallLevelOf    = "levelOf"
	CallRequestsOf = "requestsOf"
)

// Policy ids, as the vector files spell them (without the "rate-limiter/" prefix).
const (
	SlidingCounter = "sliding-counter"
	SlidingLog     = "sliding-log"
	FixedWindow    = "fixed-window"
	TokenBucket    = "token-bucket"
	GCRA           = "gcra"
	LeakyBucket    = "leaky-bucket"
	DualBucket     = "dual-bucket"
)

// spec describes one policy: the parameters it takes, the probe calls it answers, and how to
// build its rule from validated parameters.
type spec struct {
	params []string
	probes []string
	build  func(p map[string]int64) rule
}

var specs = map[string]spec{
	SlidingCounter: {[]string{"limit", "windowMs"}, []string{CallEstimateOf},
		func(p map[string]int64) rule { return newSlidingCounter(p["limit"], p["windowMs"]) }},
	SlidingLog: {[]string{"limit", "windowMs"}, []string{CallCountOf},
		func(p map[string]int64) rule { return newSlidingLog(p["limit"], p["windowMs"]) }},
	FixedWindow: {[]string{"limit", "windowMs"}, []string{CallCountOf},
		func(p map[string]int64) rule { return newFixedWindow(p["limit"], p["windowMs"]) }},
	TokenBucket: {[]string{"ratePerSec", "burst"}, []string{CallTokensOf},
		func(p map[string]int64) rule { return newTokenBucket(p["ratePerSec"], p["burst"]) }},
	GCRA: {[]string{"ratePerSec", "burst"}, []string{CallTokensOf},
		func(p map[string]int64) rule { return newGCRA(p["ratePerSec"], p["burst"]) }},
	LeakyBucket: {[]string{"ratePerSec", "capacity"}, []string{CallLevelOf},
		func(p map[string]int64) rule { return newLeakyBucket(p["ratePerSec"], p["capacity"]) }},
	DualBucket: {[]string{"requestsPerMin", "tokensPerMin"}, []string{CallRequestsOf, CallTokensOf},
		func(p map[string]int64) rule { return newDualBucket(p["requestsPerMin"], p["tokensPerMin"]) }},
}

// IDs returns the policy ids New accepts, sorted. It is safe for concurrent use.
func IDs() []string {
	ids := make([]string, 0, len(specs))
	for id := range specs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Params returns the parameter names policy id takes, or nil for an unknown id. It is safe for
// concurrent use; the caller owns the returned slice.
func Params(id string) []string {
	return slices.Clone(specs[id].params)
}

// Probes returns the probe calls policy id answers (besides allow, retryAfter and stateSize), or
// nil for an unknown id. It is safe for concurrent use; the caller owns the returned slice.
func Probes(id string) []string {
	return slices.Clone(specs[id].probes)
}

// rule is one policy's per-key state and rules. allow is only called with cost >= 0.
type rule interface {
	allow(key, cost, now int64) bool
	retryAfter(key, now int64) int64
	// probe answers one of the policy's probe calls; the call has been checked by Model.Probe.
	probe(call string, key, now int64) int64
	size() int
}

// Model is the reference model of one policy over any number of integer keys. It is not safe for
// concurrent use (see the package comment).
type Model struct {
	id   string
	spec spec
	r    rule
}

// New returns a model of policy id ("sliding-counter", "gcra", …; see IDs) with the given
// parameters. It returns an error naming an unknown id, a missing or unknown parameter, or a
// parameter outside its range (see the package comment).
// New is safe for concurrent use; the Model it returns is not.
func New(id string, params map[string]int64) (*Model, error) {
	sp, ok := specs[id]
	if !ok {
		return nil, fmt.Errorf("reference: unknown policy id %q (known: %s)", id, strings.Join(IDs(), ", "))
	}
	for _, name := range sp.params {
		v, ok := params[name]
		if !ok {
			return nil, fmt.Errorf("reference: %s: missing param %q", id, name)
		}
		hi := int64(MaxCount)
		if name == "windowMs" {
			hi = MaxWindowMs
		}
		if v < 1 || v > hi {
			return nil, fmt.Errorf("reference: %s: param %s = %d out of range [1, %d]", id, name, v, hi)
		}
	}
	for name := range params {
		if !slices.Contains(sp.params, name) {
			return nil, fmt.Errorf("reference: %s: unknown param %q (takes %s)", id, name, strings.Join(sp.params, ", "))
		}
	}
	return &Model{id: id, spec: sp, r: sp.build(params)}, nil
}

// ID returns the model's policy id.
func (m *Model) ID() string { return m.id }

// Allow decides a request of cost units for key at now (ms, in [0, MaxNow]; see CheckTime),
// counting it if admitted. A key is created before deciding, even when the request is refused,
// except by GCRA, which refuses a cost above its burst before any lookup and creates state only
// on admission. A negative cost is refused and creates nothing.
func (m *Model) Allow(key, cost, now int64) bool {
	mustTime(now)
	if cost < 0 {
		return false
	}
	return m.r.allow(key, cost, now)
}

// RetryAfter returns how many ms until a unit-cost request for key would be admitted, given no
// other traffic. An unknown key gives 0 and is not created. For every policy but the fixed
// window and GCRA (whose probes only read) it brings the key's state up to now, as Allow would.
func (m *Model) RetryAfter(key, now int64) int64 {
	mustTime(now)
	return m.r.retryAfter(key, now)
}

// Probe answers one of the policy's probe calls (estimateOf, countOf, tokensOf, levelOf,
// requestsOf; see Probes) for key at now. An unknown key reports a new key's value and is not
// created. A call the policy does not answer, or a now outside [0, MaxNow], is an error naming it.
func (m *Model) Probe(call string, key, now int64) (int64, error) {
	if !slices.Contains(m.spec.probes, call) {
		return 0, fmt.Errorf("reference: %s does not answer %q (answers %s)", m.id, call, strings.Join(m.spec.probes, ", "))
	}
	if err := CheckTime(now); err != nil {
		return 0, err
	}
	return m.r.probe(call, key, now), nil
}

// StateSize returns the number of keys tracked: every key ever created.
func (m *Model) StateSize() int { return m.r.size() }

// ceilDiv is ceilDiv(a, b) = (a + b - 1) / b of docs/policies.md, for a >= 0 and b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// mulDiv returns floor(a*b/c) for a, b >= 0 and c > 0, exact whatever the size of a*b. It panics
// if the quotient does not fit in int64, which the ranges New enforces rule out.
func mulDiv(a, b, c int64) int64 {
	q := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	q.Quo(q, big.NewInt(c))
	if !q.IsInt64() {
		panic(fmt.Sprintf("reference: %d*%d/%d overflows int64", a, b, c))
	}
	return q.Int64()
}
