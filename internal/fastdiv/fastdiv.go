// Package fastdiv divides unsigned 64-bit integers by a divisor fixed in advance with a multiply
// and shifts instead of a hardware division, which costs several times more on the hot path
// (the engine divides by the window length on every decision).
//
// The method is Granlund and Montgomery's "round-up" division by invariant integers
// ("Division by Invariant Integers using Multiplication", PLDI 1994, §4): with l = ceil(log2 d) and
// m = floor(2^64 * (2^l - d) / d) + 1, q = (t + ((n - t) >> 1)) >> (l - 1) where t = mulhi(m, n),
// exact for every n < 2^64. The tests check it against the hardware division.
package fastdiv

import "math/bits"

// Divisor divides by a fixed d. It is a plain value, safe to copy and share.
type Divisor struct {
	d      uint64
	m      uint64
	s1, s2 uint8
}

// New returns a Divisor for d, which must be positive.
//
// One branch-free formula serves every d: for d = 1, m = 0 and both shifts 0 give q = n; for a
// power of two 2^k (k >= 1), m = 1 makes t = 0 and q = (n >> 1) >> (k-1).
func New(d uint64) Divisor {
	switch {
	case d == 0:
		panic("fastdiv: division by zero")
	case d == 1:
		return Divisor{d: 1}
	case d&(d-1) == 0:
		return Divisor{d: d, m: 1, s1: 1, s2: uint8(bits.TrailingZeros64(d) - 1)}
	}
	l := uint(bits.Len64(d - 1))
	m, _ := bits.Div64((1<<l)-d, 0, d) // (2^l - d) < d, so the quotient fits 64 bits
	return Divisor{d: d, m: m + 1, s1: 1, s2: uint8(l - 1)}
}

// D returns the divisor.
func (v Divisor) D() uint64 { return v.d }

// Div returns n / d.
func (v Divisor) Div(n uint64) uint64 {
	t, _ := bits.Mul64(v.m, n)
	return (t + (n-t)>>(v.s1&63)) >> (v.s2 & 63) // masked: no check for shifts past 63

}
