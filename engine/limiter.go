// Package engine is slidelimit's in-process rate limiter over very many keys.
//
// A Limiter applies one policy to every key it is asked about. The primary policy,
// policy.SlidingCounter{Limit, Window}, holds each key to Limit units per Window, smoothly: the
// limiter counts the units admitted to the key in the current epoch-aligned window and in the one
// before, weighs the previous count by the share of that window the trailing window still covers
// (as if its units had been spread evenly, rounding down), and admits a request of n units when
// that estimate plus n is at most Limit. An admitted request is counted; a refused one consumes nothing. The other policies of
// package policy (sliding log, fixed window, token bucket, GCRA, leaky bucket, dual bucket) are
// served by the same methods; docs/policies.md gives every rule.
//
// Allow and AllowN answer yes or no; AllowBatch and AllowKeyBatch answer for a batch of keys in
// one call, as the same calls in order would, with the batch's memory loads overlapped; Take
// returns a Decision (what remains, when to retry, why);
// Wait blocks until admitted; AllowKey and the other ...Key methods take integer keys. A key whose
// state has become identical to a new key's is forgotten in the background, which changes no
// decision, so memory follows the keys in use; WithMaxKeys bounds it.
//
// New returns a *Limiter whose methods are all safe for concurrent use by any number of
// goroutines. A decision for a key that is already tracked takes no lock for every policy but the
// sliding log (which locks that key's own entry), except that a two-word cell (a state that does
// not fit one 64-bit word, for large limits; see docs/design.md) is updated under a striped lock
// on every GOARCH but amd64, and under -tags purego; and it allocates nothing whatever the key is
// made of: no method retains its key, so a key converted from bytes (Allow(string(b))) or built in a
// stack buffer stays where the caller put it. The decision: hash the key (64 bits on every
// platform), pick a shard, probe its table, load the key's packed cell, run the policy's pure
// step, and compare-and-swap the new state (recomputing on conflict). Time comes from a coarse
// clock (one atomic load and a compare), not from time.Now per call; about one decision in
// clock.RefreshEvery refreshes that clock itself, so the time a decision uses stays within about
// a millisecond of real time even when every P is busy and the clock's own goroutine cannot run
// (see package clock).
//
// Times are Unix milliseconds from 0 to clock.MaxMs = 2^62-1 (some 146 million years): a manual
// clock clamps every time it is given into that range, so no decision is made outside it. A
// manual clock should not run backwards: a state from a little later than a decision's time (as
// goroutines racing on one clock make) is read as current, never as old, but a clock set back by
// more than a cell's horizon (docs/design.md, "The horizon": some 2^(k-1) windows of a packed
// cell, minutes for a sliding counter of a large limit and a 1 ms window) may read a later state
// as an old one, and forget its counts.
package engine

import (
	"github.com/slidelimit/slidelimit/policy"
)

// Allow reports whether one unit for key is admitted now, counting it if so. Safe for concurrent
// use: each decision is applied to the key's state atomically (see the package doc for how), so
// concurrent calls for one key are decided as if one after another.
func (l *Limiter) Allow(key string) bool { return l.admit(l.hashString(key), 1) }

// AllowN reports whether n units for key are admitted now, counting them if so. Safe for concurrent
// use, as Allow is.
func (l *Limiter) AllowN(key string, n int64) bool { return l.admit(l.hashString(key), n) }

// Take decides n units for key now and returns the full Decision. An admitted request is counted;
// a refused one consumes nothing. n = 0 is a query that counts nothing and is admitted, except
// where the policy's rule refuses it: policy.DualBucket spends one request on every call (so cost
// 0 is refused once the request bucket is empty), and the fixed window refuses it for a key past
// a per-key limit lowered below its count (TakeWithLimit). A key not yet tracked is created
// before it is decided, cost 0 included: at the key cap (WithMaxKeys) cost 0 for a new key is
// refused with ReasonKeyCap, or under WithAtCap(EvictStalest) evicts to make room as any new key
// does (Peek reads a key without creating it). A negative n is refused with ReasonNegativeCost.
// Safe for concurrent use, as Allow is.
func (l *Limiter) Take(key string, n int64) Decision { return l.takeDecision(l.hashString(key), n) }

// Peek reports key's state now, consuming nothing and creating no key. Its Allowed, RetryAfter and
// Reason are what a unit request would get from the key's state; its Remaining and ResetAt
// describe the state as it stands, before any request (an admitted unit request's Decision
// reports the state after it); Counted is 0. A key not tracked reports a new key's state, also at
// the key cap (WithMaxKeys): whether a request for it would find room, or be refused with
// ReasonKeyCap, is known only by trying, since making room may reclaim or evict other keys. Safe
// for concurrent use: it reads the key's state as one snapshot, which concurrent decisions for the
// key may have changed by the time it returns.
func (l *Limiter) Peek(key string) Decision { return l.peek(l.hashString(key), 1) }

// PeekN is Peek for a request of n units: its Allowed, RetryAfter and Reason are what Take(key,
// n) would get now, with no other traffic, from the key's state, and its Remaining and ResetAt, as
// Peek's, describe that state as it stands. It consumes nothing and creates no key; Counted is 0.
// As with Peek, a key not tracked reports a new key's state, also at the key cap (WithMaxKeys),
// where Take might instead be refused with ReasonKeyCap: whether it finds room is known only by
// trying. It judges against the policy's limit, not a per-key one (TakeWithLimit). A negative n is
// refused with ReasonNegativeCost, as Take refuses it, and a cost the policy refuses before any
// lookup (GCRA's above its burst) with ReasonCostAboveLimit and nothing of the key's state;
// PeekN(key, 1) is Peek(key). The wait for n units is not, in general, a unit's wait times n, so a
// caller that shows a client when to retry a request of n units asks PeekN rather than Peek. Safe
// for concurrent use, as Peek is; it makes at most one small allocation.
func (l *Limiter) PeekN(key string, n int64) Decision { return l.peek(l.hashString(key), n) }

// AllowKey is Allow for an integer key (the caller's own id or hash), with n units. Integer keys
// are remixed under the limiter's seed by a keyed bijection, so small integers still spread over
// the shards. Integer and string keys share one space of 64-bit hashes. Safe for concurrent use, as
// Allow is.
func (l *Limiter) AllowKey(k uint64, n int64) bool { return l.admit(l.hashKey(k), n) }

// TakeKey is Take for an integer key. Safe for concurrent use, as Take is.
func (l *Limiter) TakeKey(k uint64, n int64) Decision { return l.takeDecision(l.hashKey(k), n) }

// PeekKey is Peek for an integer key. Safe for concurrent use, as Peek is.
func (l *Limiter) PeekKey(k uint64) Decision { return l.peek(l.hashKey(k), 1) }

// Inspect reports the policy's probe values for key at the limiter's current time (the estimate
// for the sliding counter; see policy.Probe), and whether the key is tracked. An untracked key
// reports a new key's values. It consumes nothing and creates nothing. After Close, when Peek
// refuses with ReasonClosed, Inspect reports a zero Probe and false, and touches nothing. Safe for
// concurrent use: like Peek, it reads one snapshot of the key's state, which concurrent decisions
// may have changed by the time it returns.
func (l *Limiter) Inspect(key string) (policy.Probe, bool) { return l.inspect(l.hashString(key)) }

// InspectKey is Inspect for an integer key. Safe for concurrent use, as Inspect is.
func (l *Limiter) InspectKey(k uint64) (policy.Probe, bool) { return l.inspect(l.hashKey(k)) }

// Policy returns the policy the limiter was built with. Safe for concurrent use: New sets it and
// nothing changes it.
func (l *Limiter) Policy() policy.Policy { return l.pol }
