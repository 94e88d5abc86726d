package engine

import "github.com/slidelimit/slidelimit/policy"

// Limiter is a rate limiter over many keys. All methods are safe for concurrent use.
// A Limiter must not be copied.
type Limiter struct {
	pol policy.Policy
}

// New returns a limiter for policy p. (Implementation in progress.)
func New(p policy.Policy, opts ...Option) (*Limiter, error) { panic("engine: in progress") }

func (l *Limiter) hashString(key string) uint64          { panic("engine: in progress") }
func (l *Limiter) hashKey(k uint64) uint64               { panic("engine: in progress") }
func (l *Limiter) take(h uint64, n int64) Decision       { panic("engine: in progress") }
func (l *Limiter) peek(h uint64) Decision                { panic("engine: in progress") }
func (l *Limiter) inspect(h uint64) (policy.Probe, bool) { panic("engine: in progress") }

// Len returns the number of keys tracked.
func (l *Limiter) Len() int { panic("engine: in progress") }

// Close stops the limiter's goroutines.
func (l *Limiter) Close() error { panic("engine: in progress") }
