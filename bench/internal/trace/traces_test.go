package trace

import (
	"slices"
	"testing"
)

// The checkpoints of docs/testing.md.
func TestTraceCheckpoints(t *testing.T) {
	for _, c := range []struct {
		name      string
		events    int
		distinct  int
		firstT    []int64
		firstKeys []uint64
	}{
		{Steady, 5491, 1, []int64{8, 18, 45, 81, 83}, []uint64{0, 0, 0, 0, 0}},
		{Bursty, 3020, 1, []int64{0, 3, 4, 8, 10}, []uint64{0, 0, 0, 0, 0}},
		{ManyKeys, 59877, 7278, []int64{0, 1, 3, 4, 6}, []uint64{0, 273, 146, 48, 476}},
		{Overload, 17785, 1, []int64{2, 3, 4, 13, 18}, []uint64{0, 0, 0, 0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := Generate(c.name)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Name != c.name {
				t.Errorf("Name = %q", tr.Name)
			}
			if len(tr.Events) != c.events {
				t.Errorf("events = %d, want %d", len(tr.Events), c.events)
			}
			keys := map[uint64]bool{}
			for i, e := range tr.Events {
				keys[e.Key] = true
				if i > 0 && e.T <= tr.Events[i-1].T {
					t.Fatalf("event %d at %d is not after event %d at %d", i, e.T, i-1, tr.Events[i-1].T)
				}
				if e.T < 0 || e.T >= tr.LengthMs {
					t.Fatalf("event %d at %d outside [0, %d)", i, e.T, tr.LengthMs)
				}
			}
			if len(keys) != c.distinct {
				t.Errorf("distinct keys = %d, want %d", len(keys), c.distinct)
			}
			var ts []int64
			var ks []uint64
			for _, e := range tr.Events[:5] {
				ts, ks = append(ts, e.T), append(ks, e.Key)
			}
			if !slices.Equal(ts, c.firstT) || !slices.Equal(ks, c.firstKeys) {
				t.Errorf("first arrivals = %v keys %v, want %v keys %v", ts, ks, c.firstT, c.firstKeys)
			}
		})
	}
}

func TestBurstyStaysInBursts(t *testing.T) {
	tr, err := Generate(Bursty)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tr.Events {
		if e.T%2000 >= 200 {
			t.Fatalf("arrival at %d, outside the first 200 ms of its 2 s period", e.T)
		}
	}
}

func TestAllIsInRegistryOrder(t *testing.T) {
	var got []string
	for _, tr := range All() {
		got = append(got, tr.Name)
	}
	if want := []string{"steady", "bursty", "many-keys", "overload"}; !slices.Equal(got, want) {
		t.Fatalf("All() = %v, want %v", got, want)
	}
}

func TestGenerateUnknown(t *testing.T) {
	if _, err := Generate("stead"); err == nil {
		t.Fatal("Generate(\"stead\") returned no error")
	}
}
