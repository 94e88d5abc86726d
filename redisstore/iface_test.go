package redisstore

import "github.com/slidelimit/slidelimit"

// The store satisfies the root interface directly: a program swaps the engine for Redis by
// changing its constructor.
var _ slidelimit.Limiter = (*Limiter)(nil)
