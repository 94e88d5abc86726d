package trace

import "fmt"

// Event is one arrival: at T milliseconds from the trace's start, for Key, at cost 1.
type Event struct {
	T   int64
	Key uint64
}

// Trace is one canonical workload: its registry name, the seed and length it was generated from,
// and its events in time order (at most one per millisecond). A Trace is never modified after
// generation and may be shared between goroutines.
type Trace struct {
	Name     string
	Seed     uint32
	LengthMs int64
	Events   []Event
}

// Names of the four canonical traces, in the registry's order.
const (
	Steady   = "steady"
	Bursty   = "bursty"
	ManyKeys = "many-keys"
	Overload = "overload"
)

// Names returns the trace names in the registry's order.
func Names() []string { return []string{Steady, Bursty, ManyKeys, Overload} }

// manyKeysRanks is the number of Zipf ranks (potential keys) in the many-keys trace.
const manyKeysRanks = 10_000

// Generate returns the named trace. Each call generates it afresh (a few milliseconds at most).
func Generate(name string) (Trace, error) {
	switch name {
	case Steady:
		return bernoulli(Steady, 50, 60_000, 0.09), nil
	case Overload:
		return bernoulli(Overload, 53, 60_000, 0.3), nil
	case Bursty:
		return bursty(), nil
	case ManyKeys:
		return manyKeys(), nil
	}
	return Trace{}, fmt.Errorf("trace: unknown trace %q (want one of %v)", name, Names())
}

// All returns the four traces in the registry's order.
func All() []Trace {
	out := make([]Trace, 0, 4)
	for _, n := range Names() {
		tr, err := Generate(n)
		if err != nil {
			panic(err) // Names and Generate are written together; a mismatch is a bug here
		}
		out = append(out, tr)
	}
	return out
}

// bernoulli: one draw per millisecond, an arrival for key 0 when it falls below p.
func bernoulli(name string, seed uint32, length int64, p float64) Trace {
	r := NewRNG(seed)
	tr := Trace{Name: name, Seed: seed, LengthMs: length}
	for t := range length {
		if r.NextFloat() < p {
			tr.Events = append(tr.Events, Event{T: t})
		}
	}
	return tr
}

// bursty: 200 ms of coin flips at the start of every 2 s, silence in between. The silent
// milliseconds take no draw, so the stream of draws is the bursts' alone.
func bursty() Trace {
	r := NewRNG(51)
	tr := Trace{Name: Bursty, Seed: 51, LengthMs: 60_000}
	for t := range tr.LengthMs {
		if t%2000 >= 200 {
			continue
		}
		if r.NextFloat() < 0.5 {
			tr.Events = append(tr.Events, Event{T: t})
		}
	}
	return tr
}

// manyKeys: a coin flip per millisecond; only an arrival draws its key, so a millisecond without
// one consumes one draw and a millisecond with one consumes two.
func manyKeys() Trace {
	r := NewRNG(52)
	z, err := NewZipf(manyKeysRanks)
	if err != nil {
		panic(err) // constant n
	}
	tr := Trace{Name: ManyKeys, Seed: 52, LengthMs: 120_000}
	for t := range tr.LengthMs {
		if r.NextFloat() < 0.5 {
			tr.Events = append(tr.Events, Event{T: t, Key: uint64(z.Sample(r))})
		}
	}
	return tr
}
