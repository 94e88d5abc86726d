// Package trace generates the registry's four canonical workloads ("traces") and computes the
// registry's metrics over a replay of them, so that any limiter's decisions can be compared with
// the registry's figures event for event.
//
// Everything here is deterministic: the random numbers come from the registry's own generator
// (splitmix32 seeding, xoshiro128**), as docs/testing.md ("Random numbers") states them, with uint32 wrapping
// arithmetic, so the same seed gives the same events in every language the registry is ported to.
//
// Concurrency: the functions of this package keep no shared state and may be called from any
// number of goroutines at once; an RNG, being a stream, belongs to one goroutine at a time; Zipf
// samplers, Traces and Events are read-only once built.
package trace

import "math/bits"

// RNG is the registry's random number generator: xoshiro128** seeded by splitmix32.
// An RNG is a plain value with no locking: use one per goroutine.
type RNG struct {
	s [4]uint32
}

// NewRNG returns a generator seeded with seed. The four state words are four successive splitmix32
// outputs; an all-zero state (a fixed point of xoshiro) is replaced by s0 = 1.
func NewRNG(seed uint32) *RNG {
	r := &RNG{}
	state := seed
	for i := range r.s {
		state += 0x9e3779b9
		z := state
		z ^= z >> 16
		z *= 0x21f0aaad
		z ^= z >> 15
		z *= 0x735a2d97
		z ^= z >> 15
		r.s[i] = z
	}
	if r.s == [4]uint32{} {
		r.s[0] = 1
	}
	return r
}

// NextU32 returns the next 32 random bits. Not safe for concurrent use.
func (r *RNG) NextU32() uint32 {
	s0, s1, s2, s3 := r.s[0], r.s[1], r.s[2], r.s[3]
	out := bits.RotateLeft32(s1*5, 7) * 9
	t := s1 << 9
	s2 ^= s0
	s3 ^= s1
	s1 ^= s2
	s0 ^= s3
	s2 ^= t
	s3 = bits.RotateLeft32(s3, 11)
	r.s = [4]uint32{s0, s1, s2, s3}
	return out
}

// NextFloat returns a float64 in [0, 1) with 32 bits of resolution: one NextU32 divided by 2^32.
// Not safe for concurrent use.
func (r *RNG) NextFloat() float64 {
	return float64(r.NextU32()) / (1 << 32)
}

// NextInt returns a uniform integer in [0, bound) by rejection, drawing until the value falls
// outside the short first stretch that would bias the modulo. bound must be at least 1; NextInt
// panics otherwise, as a programming error in the caller's constant. Not safe for concurrent use.
func (r *RNG) NextInt(bound uint32) uint32 {
	if bound == 0 {
		panic("trace: NextInt(0): bound must be at least 1")
	}
	// (2^32 - bound) mod bound, computed in uint32: -bound wraps to 2^32 - bound.
	threshold := -bound % bound
	for {
		if v := r.NextU32(); v >= threshold {
			return v % bound
		}
	}
}
