package engine

import "time"

// Reason says why a Decision came out as it did.
type Reason uint8

const (
	// ReasonOK: the request was admitted.
	ReasonOK Reason = iota
	// ReasonLimited: the key is over its limit for now; RetryAfter says for how long.
	ReasonLimited
	// ReasonCostAboveLimit: the cost exceeds what the policy can ever admit at once.
	ReasonCostAboveLimit
	// ReasonNegativeCost: the cost was negative; nothing was consumed.
	ReasonNegativeCost
	// ReasonKeyCap: the key is new and the limiter tracks as many keys as WithMaxKeys allows.
	ReasonKeyCap
	// ReasonClosed: the limiter has been closed.
	ReasonClosed
	// ReasonInvalidLimit: a per-key limit was out of range, or the policy takes none.
	ReasonInvalidLimit
)

var reasonNames = [...]string{
	ReasonOK:             "ok",
	ReasonLimited:        "limited",
	ReasonCostAboveLimit: "cost above limit",
	ReasonNegativeCost:   "negative cost",
	ReasonKeyCap:         "key cap reached",
	ReasonClosed:         "limiter closed",
	ReasonInvalidLimit:   "invalid per-key limit",
}

// String returns a short lower-case description, suitable for logs and metrics labels.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Decision is the outcome of one call, returned by value (no allocation).
type Decision struct {
	// Allowed reports whether the request was admitted; an admitted request has been counted.
	Allowed bool
	// Limit is the policy's limit (or burst, or capacity).
	Limit int64
	// Remaining is how many more units the key could take right now; never negative.
	Remaining int64
	// RetryAfter is how long to wait before a request of the same cost can be admitted, given no
	// other traffic; 0 when admitted and when the cost can never be admitted.
	RetryAfter time.Duration
	// ResetAt is when the key's state next renews: the end of the current window for the window
	// policies.
	ResetAt time.Time
	// Reason says why the request was admitted or refused.
	Reason Reason
}
