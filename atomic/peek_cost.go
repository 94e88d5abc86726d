package atomic

import (
	"fmt"
	"unsafe"

	"github.com/slidelimit/slidelimit/policy"
)

// CostPeeker is implemented by codecs whose state lives outside the cell (the sliding log), for
// PeekCost and PeekFreshCost: a copy of such a cell is a handle to the same state, so deciding on
// the copy would change the key.
//
// PeekCost checks a codec for it. Its methods are safe for concurrent use, as every codec method
// is.
type CostPeeker interface {
	// PeekCost is the package function PeekCost for this codec.
	PeekCost(c *uint64, now, cost int64) (policy.Result, Status)
	// PeekFreshCost is the package function PeekFreshCost for this codec.
	PeekFreshCost(now, cost int64) policy.Result
}

// PeekCost is Codec.Peek for a request of cost units (cost >= 0): the Result that Peek returns,
// with Allowed and RetryAfterMs those of the Result that Take would return for cost units at now,
// both read from one load of the cell. It writes nothing. Status is not OK, and nothing is
// decided, when the cell is not live. It is safe for concurrent use, as every codec method is.
//
// A codec whose state is in the cell is asked to decide on a copy of it, so that the answer
// follows the policy's own rule for every cost (the wait for cost units is not, in general, a
// unit's wait times cost); the copy is one small allocation. A CostPeeker answers itself. A codec
// whose state lives outside the cell (an Evictor) must be a CostPeeker, as a copy of its cell
// would still reach the key's state: PeekCost panics for one that is not, rather than change a key.
func PeekCost(cd Codec, c *uint64, now, cost int64) (policy.Result, Status) {
	if p, ok := costPeeker(cd); ok {
		return p.PeekCost(c, now, cost)
	}
	w0, w1 := Load(c, cd.Words())
	if w0&Flags != 0 {
		return policy.Result{}, statusOf(w0)
	}
	return peekCopy(cd, w0, w1, now, cost), OK
}

// PeekFreshCost is PeekCost for a key that is not tracked: a new key's state at now. It only
// reads cd: safe for concurrent use.
func PeekFreshCost(cd Codec, now, cost int64) policy.Result {
	if p, ok := costPeeker(cd); ok {
		return p.PeekFreshCost(now, cost)
	}
	w0, w1 := cd.Fresh(now)
	return peekCopy(cd, w0, w1, now, cost)
}

// costPeeker returns cd as a CostPeeker, or false for a codec whose state is all in its cell. It
// panics for an Evictor that is not a CostPeeker (see PeekCost).
func costPeeker(cd Codec) (CostPeeker, bool) {
	p, ok := cd.(CostPeeker)
	if _, outside := cd.(Evictor); outside && !ok {
		panic(fmt.Sprintf("atomic: PeekCost: %T keeps state outside its cell and is not a CostPeeker", cd))
	}
	return p, ok
}

// peekCopy is PeekCost on a cell of its own holding (w0, w1), which no other goroutine can reach.
// Peek runs first, as its Remaining and ResetAt describe the state before the request, as Peek's
// always do; Take's result, on the same copy, gives only the decision and its wait.
func peekCopy(cd Codec, w0, w1 uint64, now, cost int64) policy.Result {
	c := alignedCell()
	Store(c, cd.Words(), w0, w1)
	r, _, _ := cd.Peek(c, now)
	t, _ := cd.Take(c, now, cost)
	r.Allowed, r.RetryAfterMs = t.Allowed, t.RetryAfterMs
	return r
}

// alignedCell returns a new cell of two words, 16-byte aligned as a two-word compare-and-swap
// needs: three words leave room for that wherever the allocator puts them.
func alignedCell() *uint64 {
	buf := new([3]uint64)
	if uintptr(unsafe.Pointer(&buf[0]))&15 != 0 {
		return &buf[1]
	}
	return &buf[0]
}
