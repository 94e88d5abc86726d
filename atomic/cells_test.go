package atomic

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/policy"
)

// cellStep is one call in TestWordAndPairCellsAgree: a take, a refund of an earlier take, a
// peek, or an admit.
type cellStep struct {
	kind      byte // 't', 'r', 'p', 'a'
	now, cost int64
	of        int // a refund's take: its index among the steps
}

// replay runs steps on a new key's cell of codec, created at t0, and returns what each call
// reported.
func replay(codec Codec, t0 int64, steps []cellStep) []string {
	cell := aligned()
	f0, f1 := codec.Fresh(t0)
	Store(cell, codec.Words(), f0, f1)
	resets := map[int]int64{}
	var out []string
	for i, s := range steps {
		switch s.kind {
		case 't':
			r, st := codec.Take(cell, s.now, s.cost)
			if r.Allowed {
				resets[i] = r.ResetAtMs
			}
			out = append(out, fmt.Sprintf("take(%d) at %d: %+v %v", s.cost, s.now, r, st))
		case 'r':
			g, st := codec.(Refunder).Refund(cell, func() int64 { return s.now }, s.cost, resets[s.of])
			out = append(out, fmt.Sprintf("refund(%d) at %d of step %d: %d %v", s.cost, s.now, s.of, g, st))
		case 'p':
			r, pr, st := codec.Peek(cell, s.now)
			out = append(out, fmt.Sprintf("peek at %d: %+v %+v %v", s.now, r, pr, st))
		case 'a':
			ok, st := codec.Admit(cell, s.now, s.cost)
			out = append(out, fmt.Sprintf("admit(%d) at %d: %v %v", s.cost, s.now, ok, st))
		}
	}
	return out
}

// randomSteps draws n steps from t0: time moving on, stepping back up to back ms behind the
// latest step (racing goroutines whose clocks read a little apart), and landing around window
// edges; costs of 0 and above the limit among them, and refunds of everything an earlier
// admitted take counted.
func randomSteps(rng *rand.Rand, t0, w, back, limit int64, n int) []cellStep {
	now, latest := t0, t0
	var steps []cellStep
	var takes []int
	for range n {
		switch rng.IntN(6) {
		case 0:
			now += rng.Int64N(w/2 + 1)
		case 1:
			now = max(latest-rng.Int64N(back+1), 0)
		case 2:
			now = max(now+w-now%w+rng.Int64N(3)-1, 0)
		}
		latest = max(latest, now)
		cost := rng.Int64N(limit + 2)
		if rng.IntN(4) == 0 {
			cost = 0
		}
		switch k := rng.IntN(10); {
		case k < 4:
			steps = append(steps, cellStep{kind: 't', now: now, cost: cost})
			takes = append(takes, len(steps)-1)
		case k < 6 && len(takes) > 0:
			steps = append(steps, cellStep{kind: 'r', now: now, cost: limit + 1, of: takes[rng.IntN(len(takes))]})
		case k < 8:
			steps = append(steps, cellStep{kind: 'p', now: now})
		default:
			steps = append(steps, cellStep{kind: 'a', now: now, cost: cost})
		}
	}
	return steps
}

// TestWordAndPairCellsAgree: the sliding counter's one-word cell, which packs a window index of k
// bits and writes a key holding nothing half the index space away (so that sweeps see it dead), decides
// every call exactly as its two-word cell, which stores the full window, does: with time moving
// forward, and with time stepping back up to three windows between calls, as racing goroutines'
// clocks may (a goroutine preempted between reading the clock and deciding). Starts at 0 and 1 (where stepping back wraps the index), at window edges, and now.
func TestWordAndPairCellsAgree(t *testing.T) {
	for _, limit := range []int64{1, 3, 10} {
		for _, w := range []int64{10, 1000} {
			p := policy.SlidingCounter{Limit: limit, Window: time.Duration(w) * time.Millisecond}
			word, pair := NewSlidingCounter(p), NewSlidingCounterUpTo(p, 1<<21)
			if word.Words() != 1 || pair.Words() != 2 {
				t.Fatalf("cells of %d and %d words, want 1 and 2", word.Words(), pair.Words())
			}
			for _, back := range []int64{0, w, 2 * w, 3 * w} {
				for seed := range uint64(2000) {
					rng := rand.New(rand.NewPCG(seed, uint64(limit*w+back)))
					t0 := []int64{0, 1, w, w + 1, 2*w - 1, 1_764_000_000_000}[rng.IntN(6)]
					steps := randomSteps(rng, t0, w, back, limit, 12)
					a, b := replay(word, t0, steps), replay(pair, t0, steps)
					for i := range a {
						if a[i] != b[i] {
							t.Fatalf("limit %d, window %d ms, back %d ms, from %d, step %d:\n one word: %s\n two words: %s\n steps: %+v",
								limit, w, back, t0, i, a[i], b[i], steps[:i+1])
						}
					}
				}
			}
		}
	}
}
