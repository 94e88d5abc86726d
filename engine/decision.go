package engine

import "github.com/slidelimit/slidelimit"

// Decision is the outcome of one call, returned by value (no allocation). It is the root
// package's type, so a Decision from the engine and one from redisstore are interchangeable. It is
// a plain value, safe to copy and to share between goroutines.
type Decision = slidelimit.Decision

// Reason says why a Decision came out as it did (the root package's type): a plain value, safe to
// copy and to share between goroutines.
type Reason = slidelimit.Reason

// The reasons, as in the root package.
const (
	ReasonOK             = slidelimit.ReasonOK
	ReasonLimited        = slidelimit.ReasonLimited
	ReasonCostAboveLimit = slidelimit.ReasonCostAboveLimit
	ReasonNegativeCost   = slidelimit.ReasonNegativeCost
	ReasonKeyCap         = slidelimit.ReasonKeyCap
	ReasonClosed         = slidelimit.ReasonClosed
	ReasonInvalidLimit   = slidelimit.ReasonInvalidLimit
)
