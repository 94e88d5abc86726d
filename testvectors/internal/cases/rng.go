package cases

import (
	"fmt"
	"math/bits"

	"github.com/slidelimit/slidelimit/internal/reference"
	"github.com/slidelimit/slidelimit/testvectors"
)

// rng is the registry's generator (docs/testing.md, "Random numbers"): xoshiro128** seeded by
// splitmix32, all arithmetic on wrapping uint32. Using it rather than math/rand keeps the walks
// reproducible from the seed recorded in each case, in any language.
type rng struct{ s [4]uint32 }

func newRNG(seed uint32) *rng {
	r := &rng{}
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

func (r *rng) next() uint32 {
	s := &r.s
	out := bits.RotateLeft32(s[1]*5, 7) * 9
	t := s[1] << 9
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = bits.RotateLeft32(s[3], 11)
	return out
}

// intn returns a uniform integer in [0, bound) for 1 <= bound <= 2^32, without modulo bias.
func (r *rng) intn(bound int64) int64 {
	if bound < 1 || bound > 1<<32 {
		panic(fmt.Sprintf("cases: intn(%d)", bound))
	}
	if bound == 1<<32 {
		return int64(r.next())
	}
	b := uint32(bound)
	threshold := -b % b // (2^32 - bound) mod bound
	for {
		if v := r.next(); v >= threshold {
			return int64(v % b)
		}
	}
}

// walkSpec shapes a random walk.
type walkSpec struct {
	keys    int64 // keys are 0 … keys-1
	start   int64 // the first step's time
	maxDt   int64 // time advances by a uniform 0 … maxDt ms per step
	jumpDt  int64 // one step in 16 advances by 1 … jumpDt ms instead (0: never)
	maxCost int64 // allow costs are uniform in 0 … maxCost
	steps   int
}

// walk adds a case of seeded random calls: about 13 in 20 allow, 3 retryAfter, 3 probes and 1
// stateSize, over w.keys keys with time moving forward only.
func (s *set) walk(name string, params map[string]int64, seed uint32, w walkSpec) *builder {
	b := s.addSeeded(name, params, int64(seed))
	r := newRNG(seed)
	probes := reference.Probes(s.id)
	now := w.start
	for range w.steps {
		if w.jumpDt > 0 && r.intn(16) == 0 {
			now += 1 + r.intn(w.jumpDt)
		} else {
			now += r.intn(w.maxDt + 1)
		}
		key := r.intn(w.keys)
		switch k := r.intn(20); {
		case k < 13:
			b.allow(key, r.intn(w.maxCost+1), now)
		case k < 16:
			b.retry(key, now)
		case k < 19:
			b.probe(probes[r.intn(int64(len(probes)))], key, now)
		default:
			b.size()
		}
	}
	return b
}

// costParam names the parameter that bounds one request's cost, per policy.
var costParam = map[string]string{
	reference.SlidingCounter: "limit",
	reference.SlidingLog:     "limit",
	reference.FixedWindow:    "limit",
	reference.TokenBucket:    "burst",
	reference.GCRA:           "burst",
	reference.LeakyBucket:    "capacity",
	reference.DualBucket:     "tokensPerMin",
}

// honourWalk adds a case on key 1 of five rounds: a few random allows (costs up to the
// policy's costParam, times advancing by up to maxDt), mostly then filling the key, then honour,
// so that every wait it reports is checked to be exact (see builder.honour).
func (s *set) honourWalk(name string, params map[string]int64, seed uint32, start, maxDt int64) *builder {
	b := s.addSeeded(name, params, int64(seed))
	r := newRNG(seed)
	maxCost := params[costParam[s.id]]
	now := start
	for range 5 {
		for range 1 + r.intn(6) {
			now += r.intn(maxDt + 1)
			b.allow(1, 1+r.intn(min(maxCost, 1<<32)), now)
		}
		// Most rounds then fill the key, halving the cost at each refusal until a unit request is
		// refused, so that the wait is usually positive; the others check a wait that may be 0.
		if r.intn(4) != 0 {
			for c := maxCost; c >= 1; {
				if !b.step(testvectors.CallAllow, []int64{1, c, now}, nil).Bool {
					c /= 2
				}
			}
		}
		b.honour(1, now)
		now = b.lastNow
	}
	return b
}
