package atomic

import (
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
// follows the policy's own rule for every cost (no policy's wait for cost units is a unit's wait
// times cost); the copy is one small allocation. A CostPeeker answers itself.
func PeekCost(cd Codec, c *uint64, now, cost int64) (policy.Result, Status) {
	if p, ok := cd.(CostPeeker); ok {
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
	if p, ok := cd.(CostPeeker); ok {
		return p.PeekFreshCost(now, cost)
	}
	w0, w1 := cd.Fresh(now)
	return peekCopy(cd, w0, w1, now, cost)
}

// peekCopy is PeekCost on a cell of its own holding (w0, w1), which no other goroutine can reach:
// Peek, which writes nothing, then Take on the same copy.
func peekCopy(cd Codec, w0, w1 uint64, now, cost int64) policy.Result {
	buf := new([3]uint64)
	c := buf[:2]
	if uintptr(unsafe.Pointer(&buf[0]))&15 != 0 {
		c = buf[1:] // a two-word compare-and-swap needs a 16-byte aligned cell
	}
	c[0], c[1] = w0, w1
	r, _, _ := cd.Peek(&c[0], now)
	t, _ := cd.Take(&c[0], now, cost)
	r.Allowed, r.RetryAfterMs = t.Allowed, t.RetryAfterMs
	return r
}
