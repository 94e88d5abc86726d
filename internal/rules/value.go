package rules

import "github.com/slidelimit/slidelimit/policy"

// Value returns p as the plain value every backend switches on: a pointer to one of package
// policy's configurations satisfies policy.Policy too (its methods have value receivers), so
// New(&policy.SlidingCounter{...}) must mean what New(policy.SlidingCounter{...}) does. It reports
// false for a nil policy and for a nil pointer, whose methods would panic. A pure function.
func Value(p policy.Policy) (policy.Policy, bool) {
	switch q := p.(type) {
	case nil:
		return nil, false
	case *policy.SlidingCounter:
		return deref(q)
	case *policy.SlidingLog:
		return deref(q)
	case *policy.FixedWindow:
		return deref(q)
	case *policy.TokenBucket:
		return deref(q)
	case *policy.GCRA:
		return deref(q)
	case *policy.LeakyBucket:
		return deref(q)
	case *policy.DualBucket:
		return deref(q)
	}
	return p, true
}

func deref[T policy.Policy](p *T) (policy.Policy, bool) {
	if p == nil {
		return nil, false
	}
	return *p, true
}
