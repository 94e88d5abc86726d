package rules

import (
	"reflect"
	"time"

	"github.com/slidelimit/slidelimit/policy"
)

// Value returns p as the plain value every backend switches on: a pointer to one of package
// policy's configurations satisfies policy.Policy too (its methods have value receivers), so
// New(&policy.SlidingCounter{...}) must mean what New(policy.SlidingCounter{...}) does. It reports
// false for a nil policy and for a nil pointer, whose methods would panic. A pointer to a type
// that is a Policy only through the pointer (a user's type with a pointer method) is returned as
// it is, so that the backend names its type as one it does not support rather than calling it
// nil. Unlike the rest of the
// package it is for configuration, not decisions: backends call it once, in New.
func Value(p policy.Policy) (policy.Policy, bool) {
	if p == nil {
		return nil, false
	}
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Pointer {
		return p, true
	}
	if v.IsNil() {
		return nil, false
	}
	if q, ok := v.Elem().Interface().(policy.Policy); ok { // every policy of package policy is a value type
		return q, true
	}
	return p, true
}

// BucketRate returns the units a second a bucket policy refills (or, for the leaky bucket, drains)
// at: the token bucket's, GCRA's and the leaky bucket's Rate, through a pointer too; 0 for any
// other policy, whose state does not move by a rate. A units' refill takes units×1000/rate ms.
func BucketRate(p policy.Policy) int64 {
	p, _ = Value(p)
	switch b := p.(type) {
	case policy.TokenBucket:
		return b.Rate
	case policy.GCRA:
		return b.Rate
	case policy.LeakyBucket:
		return b.Rate
	}
	return 0
}

// FullSooner returns when a bucket refilling (or draining) at rate units a second, full again at
// resetAt, is full again once units given back to it are refilled at once: resetAt moved back by
// their refill, never before now. A zero resetAt (unknown), no units or a rate of 0 (a window,
// whose reset does not move with what it holds) leave resetAt as it is.
func FullSooner(resetAt time.Time, units, rate int64, now time.Time) time.Time {
	if resetAt.IsZero() || units <= 0 || rate <= 0 {
		return resetAt
	}
	// units is at most a limit, below 2^32, so units seconds in nanoseconds fit an int64.
	at := resetAt.Add(-time.Duration(units) * time.Second / time.Duration(rate))
	if at.Before(now) {
		return now
	}
	return at
}
