package trace

import (
	"strings"
	"testing"
)

func ev(ts ...int64) []Event {
	out := make([]Event, len(ts))
	for i, t := range ts {
		out[i] = Event{T: t}
	}
	return out
}

func TestRound6(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{1.0 / 3, 0.333333},
		{2.0 / 3, 0.666667},
		{0.5, 0.5},
		{1, 1},
		{0, 0},
		{0.0000004, 0},
		{0.0000006, 0.000001},
	} {
		if got := Round6(c.in); got != c.want {
			t.Errorf("Round6(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestAcceptRate(t *testing.T) {
	for _, c := range []struct {
		acc, n int
		want   float64
	}{{1, 3, 0.333333}, {2, 3, 0.666667}, {5491, 5491, 1}, {0, 7, 0}, {0, 0, 0}, {1, 8, 0.125}} {
		if got := AcceptRate(c.acc, c.n); got != c.want {
			t.Errorf("AcceptRate(%d, %d) = %v, want %v", c.acc, c.n, got, c.want)
		}
	}
}

func TestMaxBurst100ms(t *testing.T) {
	for _, c := range []struct {
		name     string
		events   []Event
		accepted []bool
		want     int
	}{
		{"empty", nil, nil, 0},
		{"none accepted", ev(0, 1, 2), []bool{false, false, false}, 0},
		// [0, 99] holds 0, 50, 99; at 100 the accept at 0 is exactly 100 ms old and has left.
		{"edge", ev(0, 50, 99, 100, 199), []bool{true, true, true, true, true}, 3},
		{"99 apart", ev(0, 99), []bool{true, true}, 2},
		{"100 apart", ev(0, 100), []bool{true, true}, 1},
		// The denied arrival at 60 sits inside the window but does not count.
		{"denials ignored", ev(0, 50, 60, 99), []bool{true, true, false, true}, 3},
		// Several accepts in one millisecond all count.
		{"same ms", ev(5, 5, 5, 5, 5), []bool{true, true, false, true, true}, 4},
		// The densest stretch comes late: 300, 310, 320, 399 (the accept at 200 left at 300).
		{"late peak", ev(0, 200, 300, 310, 320, 399, 420), []bool{true, true, true, true, true, true, true}, 4},
	} {
		got, err := MaxBurst100ms(c.events, c.accepted)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if got != c.want {
			t.Errorf("%s: MaxBurst100ms = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestMetricsRejectBadInput(t *testing.T) {
	if _, err := MaxBurst100ms(ev(5, 4), []bool{true, true}); err == nil || !strings.Contains(err.Error(), "t=4") {
		t.Errorf("out of order: err = %v, want one naming t=4", err)
	}
	if _, _, err := JainFairness(ev(1, 2), []bool{true}); err == nil || !strings.Contains(err.Error(), "2 events but 1 decisions") {
		t.Errorf("length mismatch: err = %v", err)
	}
}

func TestJainFairness(t *testing.T) {
	k := func(pairs ...uint64) []Event { // key per event, one event per ms
		out := make([]Event, len(pairs))
		for i, key := range pairs {
			out[i] = Event{T: int64(i), Key: key}
		}
		return out
	}
	for _, c := range []struct {
		name     string
		events   []Event
		accepted []bool
		want     float64
		ok       bool
	}{
		// Key 1: 3 accepts, key 2: 1, key 3 only denied. S=4, Q=10, n=3: 16/30.
		{"uneven", k(1, 1, 2, 1, 3), []bool{true, true, true, true, false}, 0.533333, true},
		// Two keys, 2 accepts each: 16 / (2*8) = 1.
		{"even", k(1, 2, 1, 2), []bool{true, true, true, true}, 1, true},
		// Keys 1 and 2 one accept each, key 3 denied twice: 4/(3*2), which rounds up.
		{"rounds up", k(1, 3, 2, 3), []bool{true, false, true, false}, 0.666667, true},
		// A denial of a key that was admitted before does not add a key.
		{"denial of known key", k(1, 2, 1), []bool{true, true, false}, 1, true},
		{"one key", k(4, 4, 4), []bool{true, false, true}, 0, false},
		{"nothing accepted", k(1, 2), []bool{false, false}, 0, false},
		{"empty", nil, nil, 0, false},
	} {
		got, ok, err := JainFairness(c.events, c.accepted)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if got != c.want || ok != c.ok {
			t.Errorf("%s: JainFairness = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestComputeJainOnlyForManyKeys(t *testing.T) {
	events := []Event{{T: 0, Key: 1}, {T: 1, Key: 2}, {T: 2, Key: 1}}
	acc := []bool{true, true, false}
	m, err := Compute(Trace{Name: Steady, Events: events}, acc, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{Events: 3, Accepted: 2, AcceptRate: 0.666667, MaxBurst100ms: 2, EntriesTracked: 2}
	if m != want {
		t.Fatalf("steady: %+v, want %+v", m, want)
	}
	m, err = Compute(Trace{Name: ManyKeys, Events: events}, acc, 2)
	if err != nil {
		t.Fatal(err)
	}
	want.JainFairness, want.HasJain = 1, true
	if m != want {
		t.Fatalf("many-keys: %+v, want %+v", m, want)
	}
}

func TestReplay(t *testing.T) {
	// A limiter that admits every other call and tracks the keys it has seen.
	events := []Event{{T: 0, Key: 7}, {T: 10, Key: 8}, {T: 20, Key: 7}, {T: 30, Key: 9}, {T: 200, Key: 7}}
	calls := 0
	seen := map[uint64]bool{}
	var times []int64
	m, err := Replay(Trace{Name: ManyKeys, Events: events}, func(t int64, key uint64) bool {
		times = append(times, t)
		seen[key] = true
		calls++
		return calls%2 == 1
	}, func() int { return len(seen) })
	if err != nil {
		t.Fatal(err)
	}
	// Admitted: key 7 at 0, 20 and 200. Key 7: 3 accepts, keys 8 and 9: 0. S=3, Q=9, n=3: 1/3.
	want := Metrics{Events: 5, Accepted: 3, AcceptRate: 0.6, MaxBurst100ms: 2, JainFairness: 0.333333, HasJain: true, EntriesTracked: 3}
	if m != want {
		t.Fatalf("Replay = %+v, want %+v", m, want)
	}
	if len(times) != 5 || times[4] != 200 {
		t.Fatalf("decide saw times %v", times)
	}
}
