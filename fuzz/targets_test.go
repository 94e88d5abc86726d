package fuzz

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/internal/reference"
	"github.com/slidelimit/slidelimit/policy"
)

// target describes one policy to the runners: its registry id and parameters, and the few
// policy-specific facts the decoder needs to aim at the rules' edges. Everything a target checks
// comes from the reference model; nothing here is an expected value.
type target struct {
	id     string
	params [2]string
	hi     [2]int64 // each parameter's largest value
	// capacity is the largest cost the policy can ever admit at once (limit, burst, capacity,
	// tokensPerMin): the decoder aims costs at it and one past it.
	capacity func(p [2]int64) int64
	// period is the policy's natural time scale (the window, the time to fill or drain the
	// bucket, a minute): the decoder aims time steps at its edges and multiples.
	period func(p [2]int64) int64
	// remaining is what a request of that cost would exactly use up now, read from the model's
	// probes, so that costs can be aimed at "exactly what is left" and one past it.
	remaining func(m *reference.Model, p [2]int64, key, now int64) int64
}

func (tg *target) paramMap(p [2]int64) map[string]int64 {
	return map[string]int64{tg.params[0]: p[0], tg.params[1]: p[1]}
}

// enginePolicy is the engine's policy value for the registry id and params.
func (tg *target) enginePolicy(p [2]int64) (policy.Policy, error) {
	window := time.Duration(p[1]) * time.Millisecond
	switch tg.id {
	case reference.SlidingCounter:
		return policy.SlidingCounter{Limit: p[0], Window: window}, nil
	case reference.SlidingLog:
		return policy.SlidingLog{Limit: p[0], Window: window}, nil
	case reference.FixedWindow:
		return policy.FixedWindow{Limit: p[0], Window: window}, nil
	case reference.TokenBucket:
		return policy.TokenBucket{Rate: p[0], Burst: p[1]}, nil
	case reference.GCRA:
		return policy.GCRA{Rate: p[0], Burst: p[1]}, nil
	case reference.LeakyBucket:
		return policy.LeakyBucket{Rate: p[0], Capacity: p[1]}, nil
	case reference.DualBucket:
		return policy.DualBucket{RequestsPerMin: p[0], TokensPerMin: p[1]}, nil
	}
	return nil, fmt.Errorf("fuzz: no engine policy for id %q", tg.id)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func probe(m *reference.Model, call string, key, now int64) int64 {
	v, err := m.Probe(call, key, now)
	if err != nil {
		panic(err) // every call passed here is one of the policy's own probes
	}
	return v
}

// windowTarget is a window policy: limit and windowMs; what is left is the limit less the probe.
func windowTarget(id string, hiLimit int64, call string) *target {
	return &target{
		id:       id,
		params:   [2]string{"limit", "windowMs"},
		hi:       [2]int64{hiLimit, reference.MaxWindowMs},
		capacity: func(p [2]int64) int64 { return p[0] },
		period:   func(p [2]int64) int64 { return p[1] },
		remaining: func(m *reference.Model, p [2]int64, key, now int64) int64 {
			return p[0] - probe(m, call, key, now)
		},
	}
}

// bucketTarget is a bucket policy whose second parameter is what a key holds at most; left
// reports what is left from the probe.
func bucketTarget(id string, params [2]string, period func(p [2]int64) int64, left func(m *reference.Model, p [2]int64, key, now int64) int64) *target {
	return &target{
		id:        id,
		params:    params,
		hi:        [2]int64{reference.MaxCount, reference.MaxCount},
		capacity:  func(p [2]int64) int64 { return p[1] },
		period:    period,
		remaining: left,
	}
}

// fillMs is docs/policies.md's fillMs (token bucket, GCRA) and drainMs (leaky bucket).
func fillMs(p [2]int64) int64 { return ceilDiv(p[1]*1000, p[0]) }

func tokensLeft(m *reference.Model, _ [2]int64, key, now int64) int64 {
	return probe(m, reference.CallTokensOf, key, now)
}

var (
	slidingCounter = windowTarget(reference.SlidingCounter, reference.MaxCount, reference.CallEstimateOf)
	slidingLog     = windowTarget(reference.SlidingLog, policy.MaxLogLimit, reference.CallCountOf)
	fixedWindow    = windowTarget(reference.FixedWindow, reference.MaxCount, reference.CallCountOf)
	tokenBucket    = bucketTarget(reference.TokenBucket, [2]string{"ratePerSec", "burst"}, fillMs, tokensLeft)
	gcra           = bucketTarget(reference.GCRA, [2]string{"ratePerSec", "burst"}, fillMs, tokensLeft)
	leakyBucket    = bucketTarget(reference.LeakyBucket, [2]string{"ratePerSec", "capacity"}, fillMs,
		func(m *reference.Model, p [2]int64, key, now int64) int64 {
			return p[1] - probe(m, reference.CallLevelOf, key, now)
		})
	dualBucket = bucketTarget(reference.DualBucket, [2]string{"requestsPerMin", "tokensPerMin"},
		func([2]int64) int64 { return 60_000 }, tokensLeft)

	allTargets = []*target{slidingCounter, slidingLog, fixedWindow, tokenBucket, gcra, leakyBucket, dualBucket}
)
