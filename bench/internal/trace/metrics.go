package trace

import (
	"fmt"
	"math"
)

// Metrics are the registry's figures for one replay of one trace.
type Metrics struct {
	// Events is the number of arrivals replayed; Accepted how many of them were admitted.
	Events, Accepted int
	// AcceptRate is Round6(Accepted / Events); 0 for an empty replay.
	AcceptRate float64
	// MaxBurst100ms is the most accepts, over all keys together, inside any [t-99, t] ms.
	MaxBurst100ms int
	// JainFairness is Jain's index over the accepts per key seen, rounded to 6 decimals; HasJain
	// reports whether it is defined (the many-keys trace only, at least 2 keys, some accept).
	JainFairness float64
	HasJain      bool
	// EntriesTracked is the largest number of keys the limiter tracked, sampled after every event.
	EntriesTracked int
}

// Round6 rounds v half up to 6 decimals as the registry does: floor(v*1e6 + 0.5) / 1e6.
func Round6(v float64) float64 {
	// The explicit conversion forbids fusing the multiply and the add into one FMA (the Go spec
	// lets the compiler fuse x*y+z otherwise, on arm64 for one), which would round differently
	// from the registry on the last bit, and sometimes on the sixth decimal.
	return math.Floor(float64(v*1e6)+0.5) / 1e6
}

// AcceptRate returns Round6(accepted / events), and 0 when events is 0.
func AcceptRate(accepted, events int) float64 {
	if events == 0 {
		return 0
	}
	return Round6(float64(accepted) / float64(events))
}

// MaxBurst100ms returns the most accepted events inside any window [t-99, t] ms: an accept exactly
// 100 ms old has left the window. Denied events do not count. events must be in time order, and
// accepted[i] says whether events[i] was admitted.
func MaxBurst100ms(events []Event, accepted []bool) (int, error) {
	if err := check(events, accepted); err != nil {
		return 0, err
	}
	var in []int64 // times of the accepts still inside the window, oldest first from head
	head, best := 0, 0
	for i, e := range events {
		if !accepted[i] {
			continue
		}
		in = append(in, e.T)
		for in[head] <= e.T-100 {
			head++
		}
		best = max(best, len(in)-head)
	}
	return best, nil
}

// JainFairness returns Jain's fairness index of the accepts per key, S²/(n·Q) with S the sum and Q
// the sum of squares of the accepts over the n keys that arrived at least once (admitted or not),
// rounded by Round6. ok is false, and the index omitted, when n < 2 or Q = 0.
func JainFairness(events []Event, accepted []bool) (index float64, ok bool, err error) {
	if err := check(events, accepted); err != nil {
		return 0, false, err
	}
	perKey := make(map[uint64]int64)
	for i, e := range events {
		if accepted[i] {
			perKey[e.Key]++
		} else if _, seen := perKey[e.Key]; !seen {
			perKey[e.Key] = 0
		}
	}
	var s, q int64
	for _, a := range perKey {
		s += a
		q += a * a
	}
	n := len(perKey)
	if n < 2 || q == 0 {
		return 0, false, nil
	}
	// In float64 like the registry: S, Q and n are exact integers below 2^53 for any trace that
	// fits in memory, and this division is the only rounding before Round6.
	return Round6(float64(s) * float64(s) / (float64(n) * float64(q))), true, nil
}

// Compute returns every metric for a replay of tr in which accepted[i] is the decision for
// tr.Events[i] and entriesTracked the largest tracked-key count sampled after each event. The
// Jain index is computed for the many-keys trace only, as the registry does.
func Compute(tr Trace, accepted []bool, entriesTracked int) (Metrics, error) {
	burst, err := MaxBurst100ms(tr.Events, accepted)
	if err != nil {
		return Metrics{}, fmt.Errorf("trace %s: %w", tr.Name, err)
	}
	m := Metrics{Events: len(tr.Events), MaxBurst100ms: burst, EntriesTracked: entriesTracked}
	for _, a := range accepted {
		if a {
			m.Accepted++
		}
	}
	m.AcceptRate = AcceptRate(m.Accepted, m.Events)
	if tr.Name == ManyKeys {
		m.JainFairness, m.HasJain, err = JainFairness(tr.Events, accepted)
		if err != nil {
			return Metrics{}, fmt.Errorf("trace %s: %w", tr.Name, err)
		}
	}
	return m, nil
}

// Replay feeds tr's events in order to decide, sampling tracked after every event, and returns
// the metrics. decide(t, key) must decide one unit for key at time t ms and report whether it was
// admitted; tracked reports how many keys the limiter tracks (nil when it cannot tell, leaving
// EntriesTracked 0). Replay calls them from the calling goroutine only.
func Replay(tr Trace, decide func(t int64, key uint64) bool, tracked func() int) (Metrics, error) {
	accepted := make([]bool, len(tr.Events))
	peak := 0
	for i, e := range tr.Events {
		accepted[i] = decide(e.T, e.Key)
		if tracked != nil {
			peak = max(peak, tracked())
		}
	}
	return Compute(tr, accepted, peak)
}

func check(events []Event, accepted []bool) error {
	if len(events) != len(accepted) {
		return fmt.Errorf("%d events but %d decisions", len(events), len(accepted))
	}
	for i := 1; i < len(events); i++ {
		if events[i].T < events[i-1].T {
			return fmt.Errorf("event %d at t=%d precedes event %d at t=%d: events must be in time order",
				i, events[i].T, i-1, events[i-1].T)
		}
	}
	return nil
}
