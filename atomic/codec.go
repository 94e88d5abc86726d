package atomic

import "github.com/slidelimit/slidelimit/policy"

// Codec packs one policy's per-key state into a cell and runs the policy's pure step on it inside
// a compare-and-swap loop. A Codec is immutable after construction and safe for concurrent use;
// every method that takes a cell may race with any other on the same cell.
type Codec interface {
	// Words returns the cell width in 64-bit words: 1, or 2 for a 16-byte cell.
	Words() int
	// Fresh returns a new key's state at now.
	Fresh(now int64) (w0, w1 uint64)
	// Take decides a request of cost (>= 0) at now and counts it when admitted. A refused request
	// writes nothing. Status is not OK, and nothing is decided, when the cell is not live.
	Take(c *uint64, now, cost int64) (policy.Result, Status)
	// Admit is Take reduced to the decision: the hot path of Allow.
	Admit(c *uint64, now, cost int64) (bool, Status)
	// Peek reports what a unit request would get at now, and the probe values, writing nothing.
	Peek(c *uint64, now int64) (policy.Result, policy.Probe, Status)
	// PeekFresh is Peek for a key that is not tracked.
	PeekFresh(now int64) (policy.Result, policy.Probe)
	// Dead reports whether the state (w0, w1) is, at now, indistinguishable from a new key's, so
	// that forgetting it cannot change any decision. ref is the start of the shard's last complete
	// sweep: every live state was written after it (give or take a stalled writer), so a state
	// whose time wraps is decoded relative to ref rather than to now, which may lie any distance
	// ahead (a paused process, a manual clock's jump).
	Dead(w0, w1 uint64, ref, now int64) bool
	// Normalize re-encodes a dead state as a new key's state at now, for limiters that keep every
	// key; changed is false when the state is already in that form, and where the codec leaves a
	// dead state as it is because it decides as a new key's already (the two-word sliding
	// counter, token bucket and leaky bucket, whose cells keep full times).
	Normalize(w0, w1 uint64, now int64) (n0, n1 uint64, changed bool)
	// Horizon returns, in ms, how long a state may go unvisited by a sweep before its encoding
	// could become ambiguous (math.MaxInt64 when it never can).
	Horizon() int64
	// Stale reports how long ago (ms) the state was last renewed, and whether it may be evicted to
	// make room at the key cap: only while the key holds less than half of its limit (the units
	// counted in its window, or taken from its bucket, or its level), so that a key using its
	// limit is never reset by eviction. limit is the limit to judge the key against, for codecs
	// that take per-key limits (LimitTaker); 0, and every other codec, judges against the
	// policy's.
	Stale(w0, w1 uint64, now, limit int64) (ageMs int64, evictable bool)
}

// underHalf is Stale's rule: used units are less than half of limit.
func underHalf(used, limit int64) bool { return 2*used < limit }

// judged returns the limit a Stale call judges against: limit, or the policy's when 0.
func judged(limit, policyLimit int64) int64 {
	if limit > 0 {
		return limit
	}
	return policyLimit
}

// FreshAdmitter is implemented by codecs that can decide a new key's first request without a
// cell, so that the table can write a new key's state with that request already counted, before
// any other goroutine can reach the key: one store instead of a new key's state and then a
// decision's compare-and-swap on it.
//
// The sliding counter implements it, the default policy, whose new key's decision is one
// comparison. The other codecs do not: sharing Admit's decision with FreshAdmit would move it into
// a function too large for the compiler to inline, a call more on every decision of a tracked key,
// to spare inserts instructions that, on tables larger than the caches, they do not wait on
// (bench/README.md, "A new key's first request, decided as it is written").
//
// The table (package shard) checks a codec for it. Its methods are safe for concurrent use, as
// every codec method is.
type FreshAdmitter interface {
	// FreshAdmit returns the state that Admit, deciding cost (>= 0) units at now, would leave in a
	// cell holding Fresh(now), and Admit's decision.
	FreshAdmit(now, cost int64) (w0, w1 uint64, admitted bool)
}

// Evictor is implemented by codecs whose state lives outside the cell, such as the sliding log,
// whose cell holds a handle to a ring of timestamps that updates change in place without changing
// the cell. For them "judge dead, then mark Dead if the cell is unchanged" is not atomic with
// respect to updates, so the table calls Evict instead, which must judge and mark under whatever
// excludes updates (a per-key lock); an update must re-check, under that same exclusion, that its
// cell is still live before it writes.
//
// The table (package shard) checks a codec for it. Its methods are safe for concurrent use, as
// every codec method is.
type Evictor interface {
	// Evict marks the cell Dead if its state is dead at now (see Codec.Dead), reports whether it
	// did, and releases the state's storage when it did.
	Evict(c *uint64, ref, now int64) bool
	// Release frees the storage of a state that a rebuild dropped: the cell it came from is
	// marked Moved, so no update can reach the state any more.
	Release(w0, w1 uint64)
}

// CostChecker is implemented by codecs whose policy refuses the costs above a bound before any
// lookup, without creating the key (GCRA refuses a cost above its burst that way).
//
// The engine checks a codec for it when a limiter is built. Its methods are safe for concurrent
// use, as every codec method is.
type CostChecker interface {
	// MaxCost returns the largest cost that is looked up; a larger one is refused before any
	// lookup. The engine keeps it as a number, so that the check on its hot path is one compare.
	MaxCost() int64
}

// Refunder is implemented by codecs whose policy can give units back exactly (see
// engine.Limiter.Refund).
//
// The engine checks a codec for it when a limiter is built. Its methods are safe for concurrent
// use, as every codec method is.
type Refunder interface {
	// Refund gives back up to cost units counted by a request admitted with result ResetAtMs
	// resetAt, and returns how many it gave back. It reads the time from clock after each load of
	// the cell, so that it refunds at a time no earlier than that of any admission the cell holds:
	// read once before, the time could be older than a racing admission's, and a bucket's rule
	// would then count a refill that had not happened (GCRA's state keeps no time of its own).
	Refund(c *uint64, clock func() int64, cost, resetAt int64) (int64, Status)
}

// LimitTaker is implemented by codecs that can decide a key against its own limit.
//
// The engine checks a codec for it when a limiter is built. Its methods are safe for concurrent
// use, as every codec method is.
type LimitTaker interface {
	// TakeLimit is Take with limit in place of the policy's (1 <= limit <= MaxLimit()).
	TakeLimit(c *uint64, now, cost, limit int64) (policy.Result, Status)
	// MaxLimit returns the largest limit the cell can hold counts for.
	MaxLimit() int64
}

// LiveFilter is implemented by codecs that can tell most live states apart by one mask test on
// the first word, so that a sweep over millions of keys skips them without decoding each:
// a state w0 with w0&mask == a or w0&mask == b (for the pattern at now) is certainly not dead.
// Anything else goes to Dead as usual.
//
// The table (package shard) checks a codec for it. Its methods are safe for concurrent use, as
// every codec method is.
type LiveFilter interface {
	// LivePattern returns the pattern at now: a state word w0 is live for certain when
	// w0&mask is a or b. A pure function of now, safe for concurrent use.
	LivePattern(now int64) (mask, a, b uint64)
}

// mustBeValid panics with p's validation error: a codec of an invalid policy would divide by
// zero, or build cells that cannot hold its counts, somewhere less clear.
func mustBeValid(p policy.Policy) {
	if err := p.Validate(); err != nil {
		panic("atomic: " + err.Error())
	}
}
