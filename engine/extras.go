package engine

import (
	"context"
	"errors"
	"fmt"
	satomic "sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/policy"
)

// sizeForKeyLimits rebuilds the codec with cells wide enough for per-key limits up to maxLimit.
func sizeForKeyLimits(p policy.Policy, codec atomic.Codec, maxLimit int64) (atomic.Codec, error) {
	if maxLimit == 0 {
		return codec, nil
	}
	if sc, ok := p.(policy.SlidingCounter); ok {
		return atomic.NewSlidingCounterUpTo(sc, maxLimit), nil
	}
	lt, ok := codec.(atomic.LimitTaker)
	if !ok {
		return nil, fmt.Errorf("engine: WithMaxLimit(%d): policy %q takes no per-key limits", maxLimit, p.ID())
	}
	if maxLimit <= lt.MaxLimit() {
		return codec, nil // its cells hold counts up to that already
	}
	return nil, fmt.Errorf("engine: WithMaxLimit(%d): policy %q takes per-key limits up to its own Limit (%d) only; only the sliding counter's cells can be sized above it", maxLimit, p.ID(), lt.MaxLimit())
}

// TakeWithLimit is Take for a key whose limit is limit rather than the policy's: premium tenants,
// internal services. Keys taken at the default limit pay nothing for this; a call here costs what
// Take costs. limit must be at least 1 and at most the larger of the policy's limit and
// WithMaxLimit's; otherwise, or when the policy takes no per-key limits, the request is refused with
// ReasonInvalidLimit and consumes nothing, and its Decision's Limit is the policy's. For a valid
// limit every Decision reports limit as its Limit, refusals made before the policy runs (a
// negative cost, the key cap, Close) included. It is safe for
// concurrent use, as Take is.
//
// The limit is not stored with the key: pass the same one on every call for that key. A key's
// counts are units, so a changed limit applies at once, mid-window: raised, the key may take the
// difference straight away; lowered below what it has taken, it is refused until its counts decay
// under the new limit. With WithAtCap(EvictStalest), eviction at the cap judges every key against
// the lowest limit given here so far (or the policy's, if lower), so no key is judged against a
// limit above its own.
func (l *Limiter) TakeWithLimit(key string, n, limit int64) Decision {
	return l.takeWithLimit(l.hashString(key), n, limit)
}

// TakeKeyWithLimit is TakeWithLimit for an integer key. Safe for concurrent use, as TakeWithLimit
// is.
func (l *Limiter) TakeKeyWithLimit(k uint64, n, limit int64) Decision {
	return l.takeWithLimit(l.hashKey(k), n, limit)
}

func (l *Limiter) takeWithLimit(h uint64, n, limit int64) Decision {
	if l.limits == nil || limit < 1 || limit > l.limits.MaxLimit() {
		if l.closed.Load() { // Close first, as take checks it (see Close)
			return l.refuse(ReasonClosed)
		}
		return l.refuse(ReasonInvalidLimit)
	}
	if l.atCap == EvictStalest {
		lower(&l.judgeLimit, limit)
	}
	r, reason := l.take(h, n, opTakeLimit, limit)
	if reason != ReasonOK {
		d := l.refuse(reason)
		d.Limit = limit // the limit this call is held to, as a decision by the policy reports
		return d
	}
	return l.decision(r, n)
}

// Refund gives back up to n units that the admitted Decision d counted for key, for a request
// that then failed upstream, so that a caller limiting on successes is not charged for errors.
// It gives back only what leaves the key exactly as if the request had cost that much less, and
// returns how many units that was: never more than min(n, d.Counted), fewer if a concurrent
// refund got there first, 0 for a refused d (whose Counted is 0), and 0 for a policy that cannot
// give units back exactly. It never creates a key.
//
// A Decision is a plain value, so Refund cannot tell a second refund of the same d from the
// first: each call is bounded by d.Counted on its own, and k refunds of one d give back at most
// k*d.Counted in all (and never more than the key still holds from d's window or bucket state).
// Refund each decision once. Nor can it tell the key d counted for from the same key tracked
// anew: under WithAtCap(EvictStalest) a key evicted at the cap after d, whose units the limiter
// has then forgotten, and tracked again since, is refunded from what its new requests counted in
// d's window (at most d.Counted of them), as if they had been d's. By policy:
//
//   - sliding counter: all of them while the window that counted them is the current or the
//     previous one, then 0;
//   - fixed window: all of them while the window that counted them (ending at d.ResetAt) is the
//     current one, then 0;
//   - token bucket, GCRA, leaky bucket: floor((Rate*(ResetAt - now - 1ms) + gcd(Rate, 1000)) /
//     1000) at most, Rate per second and times in ms: as long as the bucket that never saw them
//     could not have filled (drained, for the leaky bucket) since, after which refills past full
//     (drains past empty) have lost track of them. A refund at once gets all of them when Rate
//     divides 1000, and may get fewer otherwise, as d.ResetAt holds the deficit only to the ms;
//     what stays charged then is what cannot be told apart from a refill that really happened;
//   - sliding log, dual bucket: none (they do not implement refunds).
//
// A bucket's refund is exact when no refund of the same key, for a request admitted before d,
// comes after d's admission and before d's refund: such a refund raises what d's admission left,
// which the bucket's rule cannot see, and d's refund may then give back up to that refund's
// units (or what the bucket refilled in between, if fewer) more than exact (docs/design.md,
// "Where a bucket's refund is not exact"). Refunds made at once, before the key's next
// admission, or in the reverse order of their admissions, are exact.
func (l *Limiter) Refund(key string, n int64, d Decision) int64 {
	return l.refund(l.hashString(key), n, d)
}

// RefundKey is Refund for an integer key. Safe for concurrent use, as Refund is.
func (l *Limiter) RefundKey(k uint64, n int64, d Decision) int64 { return l.refund(l.hashKey(k), n, d) }

func (l *Limiter) refund(h uint64, n int64, d Decision) int64 {
	h, n = nonzero(h), min(n, d.Counted)
	if l.refunds == nil || !d.Allowed || n <= 0 || l.closed.Load() {
		return 0
	}
	sh := l.shardOf(h, l.now())
	for {
		c := sh.Table().Find(h)
		if c == nil {
			return 0
		}
		g, st := l.refunds.Refund(c, l.clockNow, n, d.ResetAt.UnixMilli())
		switch st {
		case atomic.OK:
			return g
		case atomic.IsDead:
			return 0 // evicted: its state was a new key's, holding nothing to give back
		}
		sh.Wait()
	}
}

// lower sets v to x if x is below it.
func lower(v *satomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x >= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// Errors returned by Wait for requests that waiting cannot help: the root package's, so that
// errors.Is works whichever backend returned them.
var (
	ErrCostAboveLimit = slidelimit.ErrCostAboveLimit
	ErrNegativeCost   = slidelimit.ErrNegativeCost
	ErrKeyCap         = slidelimit.ErrKeyCap
	ErrClosed         = slidelimit.ErrClosed
	ErrInvalidLimit   = slidelimit.ErrInvalidLimit
)

// Wait blocks until n units for key are admitted (and counted), or ctx ends. It sleeps the solved
// RetryAfter between attempts rather than polling, so a waiter costs one decision per wake-up.
// When ctx ends first it returns ctx's error and has consumed nothing; when ctx's deadline is
// sooner than the next possible admission it returns context.DeadlineExceeded at once. A request
// that waiting cannot help (a cost above the limit, a negative cost, the key cap, a closed
// limiter) returns the matching error at once; a closed limiter returns ErrClosed before ctx is
// looked at, and Close wakes a waiter that is asleep, which then returns ErrClosed. Waiters are not queued: under contention a waiter
// may be overtaken by requests that arrive while it sleeps, as with any rate limiter that
// decides on arrival. A nil ctx is taken as context.Background(). Safe for concurrent use: any
// number of goroutines may wait on one key, or on many, while others decide.
func (l *Limiter) Wait(ctx context.Context, key string, n int64) error {
	return l.wait(ctx, l.hashString(key), n)
}

// WaitKey is Wait for an integer key. Safe for concurrent use, as Wait is: any number of goroutines
// may wait on one key.
func (l *Limiter) WaitKey(ctx context.Context, k uint64, n int64) error {
	return l.wait(ctx, l.hashKey(k), n)
}

func (l *Limiter) wait(ctx context.Context, h uint64, n int64) error {
	if l.closed.Load() { // before ctx, so that every call after Close reports it (see Close)
		return ErrClosed
	}
	if ctx == nil { // a programming error, read as redisstore reads it rather than a panic
		ctx = context.Background()
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := l.takeDecision(h, n)
		if d.Allowed {
			return nil
		}
		if err := d.Reason.Err(); err != nil {
			return err
		}
		// The coarse clock may trail the timer by a tick; the next decision then asks for the
		// remaining millisecond.
		sleep := max(d.RetryAfter, time.Millisecond)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < sleep {
			return context.DeadlineExceeded
		}
		if timer == nil {
			timer = time.NewTimer(sleep)
		} else {
			timer.Reset(sleep)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.done:
			return ErrClosed
		case <-timer.C:
		}
	}
}

// Multi checks one request against several limiters at once (for example 10 per second and 1,000
// per hour on the same key), all or nothing: when one refuses, the units the others had counted
// are given back at once, as far as a refund can prove them (see All): a refused request leaves
// the window policies charged with none of them, and a bucket with what its refund could not
// prove, which is nothing when Rate divides 1000 and no time passed. Its methods are safe
// for concurrent use. Between the take and the give-back, a concurrent request may see the units
// as taken and be refused; that is the price of not holding a lock across limiters.
//
// A Multi is made by All. The zero Multi (and a nil one) holds no limiter and refuses every
// request with ReasonClosed, as a limiter that cannot decide: admitting would limit nothing. A
// Multi one of whose limiters is closed refuses every request with ReasonClosed too, the first
// closed limiter's limit reported, whatever its cost: Close is checked before the arguments, as a
// Limiter's Take checks it, and as redisstore's Multi does.
type Multi struct {
	ls []*Limiter
	// least is the first of ls with the smallest limit: a cost above its limit is asked of it alone.
	least *Limiter
}

// All returns a Multi over ls, which must be non-empty and all give units back exactly
// (see Refund): the sliding counter, fixed window, token bucket, GCRA and leaky bucket do; the
// sliding log and dual bucket do not. The window policies give back everything a refused
// request counted. The buckets give back what is exact (see Refund): everything when the refusal
// comes within the millisecond of the take and Rate divides 1000, and possibly less otherwise,
// since a bucket near full may, in the meantime, have refilled past what it could hold. All only
// reads the limiters, and may run concurrently with their use; the Multi's methods are safe for
// concurrent use.
func All(ls ...*Limiter) (*Multi, error) {
	if len(ls) == 0 {
		return nil, errors.New("engine: All: no limiters")
	}
	for i, l := range ls {
		if l == nil {
			return nil, fmt.Errorf("engine: All: limiter %d is nil", i)
		}
		if l.refunds == nil {
			return nil, fmt.Errorf("engine: All: limiter %d (%s) cannot give units back", i, l.pol.ID())
		}
	}
	least := ls[0]
	for _, l := range ls[1:] {
		if l.limit < least.limit {
			least = l
		}
	}
	return &Multi{ls: append([]*Limiter(nil), ls...), least: least}, nil
}

// Allow reports whether one unit for key is admitted by every limiter. Safe for concurrent use, as
// Take is.
func (m *Multi) Allow(key string) bool { return m.Take(key, 1).Allowed }

// Take decides n units for key against every limiter in order. Admitted, it returns the decision
// of the limiter with the least Remaining; refused, the refusing limiter's decision, after giving
// back what the earlier limiters counted. A cost above the smallest of the limiters' limits is
// refused by that limiter alone (the first of them, if several share it), with
// ReasonCostAboveLimit and no RetryAfter, whatever the others hold: no wait admits it. Safe for
// concurrent use: the Multi is never changed after All, and a concurrent request may find taken
// the units that this call gives back after a refusal (see Multi).
func (m *Multi) Take(key string, n int64) Decision {
	return m.take(n, func(l *Limiter) uint64 { return l.hashString(key) })
}

// TakeKey is Take for an integer key. Safe for concurrent use, as Take is.
func (m *Multi) TakeKey(k uint64, n int64) Decision {
	return m.take(n, func(l *Limiter) uint64 { return l.hashKey(k) })
}

func (m *Multi) take(n int64, hash func(*Limiter) uint64) Decision {
	if m == nil || len(m.ls) == 0 {
		return Decision{Reason: ReasonClosed}
	}
	// A closed limiter answers before the cost is looked at, for every member, so that a Multi
	// with one closed answers as that limiter would, here and on Redis (redisstore.Multi).
	for _, l := range m.ls {
		if l.closed.Load() {
			return l.refuse(ReasonClosed)
		}
	}
	if n > m.least.limit {
		// Asked alone, so that an earlier limiter's refusal, with a wait, does not answer for a
		// request that no wait admits.
		return m.least.takeDecision(hash(m.least), n)
	}
	var taken [8]Decision // enough for the usual few limits without allocating
	ds := taken[:0]
	var tightest Decision
	for i, l := range m.ls {
		h := hash(l)
		d := l.takeDecision(h, n)
		if !d.Allowed {
			for j, prev := range ds {
				m.ls[j].refund(hash(m.ls[j]), n, prev)
			}
			return d
		}
		ds = append(ds, d)
		if i == 0 || d.Remaining < tightest.Remaining {
			tightest = d
		}
	}
	return tightest
}
