// Package fastdiv divides unsigned 64-bit integers by a divisor fixed in advance with a multiply
// and shifts instead of a hardware division, which costs several times more on the hot path
// (the engine divides by the window length on every decision).
//
// The method is Granlund and Montgomery's "round-up" division by invariant integers
// ("Division by Invariant Integers using Multiplication", PLDI 1994, §4): with l = ceil(log2 d) and
// m = floor(2^64 * (2^l - d) / d) + 1, q = (t + ((n - t) >> 1)) >> (l - 1) where t = mulhi(m, n),
// exact for every n < 2^64. The tests check it against the hardware division.
//
// Below 2^62 (Div62) a cheaper form of the same theorem (§4, Theorem 4.2 with N = 62) needs no
// correction step: with m62 = ceil(2^(62+l) / d), which is at most 2^63, q = mulhi(4n, m62) >> l.
// Times in milliseconds since the epoch stay below 2^62, so the engine's index of a window takes
// this form.
package fastdiv

import "math/bits"

// Divisor divides by a fixed d. It is a plain value, safe to copy and share.
type Divisor struct {
	m62    uint64 // ceil(2^(62+l) / d)
	m      uint64
	l      uint8 // ceil(log2 d)
	s1, s2 uint8
	d      uint64
}

// New returns a Divisor for d, which must be positive.
//
// One branch-free formula serves every d: for d = 1, m = 0 and both shifts 0 give q = n; for a
// power of two 2^k (k >= 1), m = 1 makes t = 0 and q = (n >> 1) >> (k-1).
func New(d uint64) Divisor {
	v := newDivisor(d)
	v.l, v.m62 = magic62(d)
	return v
}

func newDivisor(d uint64) Divisor {
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

// magic62 returns Div62's shift l = ceil(log2 d) and multiplier ceil(2^(62+l) / d). Above 2^63
// every n < 2^62 divides to 0, which m62 = 0 gives without a shift of 64.
func magic62(d uint64) (uint8, uint64) {
	if d > 1<<63 {
		return 0, 0
	}
	l := uint(bits.Len64(d - 1))
	var hi, lo uint64
	if e := 62 + l; e >= 64 {
		hi = 1 << (e - 64) // below d, since d > 2^(l-1): the quotient fits 64 bits
	} else {
		lo = 1 << e
	}
	q, r := bits.Div64(hi, lo, d)
	if r != 0 {
		q++
	}
	return uint8(l), q
}

// D returns the divisor.
func (v *Divisor) D() uint64 { return v.d }

// Div returns n / d.
func (v *Divisor) Div(n uint64) uint64 {
	t, _ := bits.Mul64(v.m, n)
	return (t + (n-t)>>(v.s1&63)) >> (v.s2 & 63) // masked: no check for shifts past 63
}

// Div62 returns n / d for n < 2^62 (larger n give wrong quotients): one multiply and one shift.
func (v *Divisor) Div62(n uint64) uint64 {
	hi, _ := bits.Mul64(n<<2, v.m62)
	return hi >> (v.l & 63)
}
