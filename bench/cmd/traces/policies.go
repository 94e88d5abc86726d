package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/policy"
)

// refPolicy is one policy in the registry's reference configuration: 100 permits per second.
type refPolicy struct {
	id     string
	pol    policy.Policy
	params string // the configuration as printed
}

// referencePolicies returns every registry policy at 100 per second, in the registry's order.
// The dual bucket's reference is not given by the registry: 6000 requests and 6000 tokens per
// minute is the same long-run rate (100/s at cost 1), but a bucket that holds a minute's worth
// of both, so it admits far larger bursts than the one-second policies.
func referencePolicies() []refPolicy {
	const w = time.Second
	return []refPolicy{
		{"sliding-counter", policy.SlidingCounter{Limit: 100, Window: w}, "limit=100 window=1000ms"},
		{"sliding-log", policy.SlidingLog{Limit: 100, Window: w}, "limit=100 window=1000ms"},
		{"fixed-window", policy.FixedWindow{Limit: 100, Window: w}, "limit=100 window=1000ms"},
		{"token-bucket", policy.TokenBucket{Rate: 100, Burst: 100}, "rate=100/s burst=100"},
		{"gcra", policy.GCRA{Rate: 100, Burst: 100}, "rate=100/s burst=100"},
		{"leaky-bucket", policy.LeakyBucket{Rate: 100, Capacity: 100}, "rate=100/s capacity=100"},
		{"dual-bucket", policy.DualBucket{RequestsPerMin: 6000, TokensPerMin: 6000}, "requestsPerMin=6000 tokensPerMin=6000"},
	}
}

// selectPolicies resolves the -policy flag: one registry id, or "all".
func selectPolicies(id string) ([]refPolicy, error) {
	all := referencePolicies()
	if id == "all" {
		return all, nil
	}
	ids := make([]string, 0, len(all)+1)
	for _, p := range all {
		if p.id == id {
			return []refPolicy{p}, nil
		}
		ids = append(ids, p.id)
	}
	ids = append(ids, "all")
	return nil, fmt.Errorf("unknown policy %q for -policy (want one of %s)", id, strings.Join(ids, ", "))
}
