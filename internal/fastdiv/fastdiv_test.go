package fastdiv

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDivMatchesHardware(t *testing.T) {
	divisors := []uint64{1, 2, 3, 5, 7, 10, 60, 100, 641, 1000, 1001, 60_000, 86_400_000,
		2_592_000_000, 1<<31 - 1, 1 << 31, 1<<31 + 1, 1<<32 - 1, 1 << 32, 1<<32 + 1, 1<<63 - 1, 1 << 63, 1<<63 + 1, math.MaxUint64}
	r := rand.New(rand.NewPCG(7, 11))
	for range 2000 {
		divisors = append(divisors, r.Uint64N(1<<33)+1, r.Uint64()|1)
	}
	for _, d := range divisors {
		v := New(d)
		ns := []uint64{0, 1, d - 1, d, d + 1, 2*d - 1, 2 * d, math.MaxUint64, math.MaxUint64 - 1, 1 << 63, 1<<63 - 1, 1 << 41}
		for range 200 {
			ns = append(ns, r.Uint64(), r.Uint64N(1<<42), r.Uint64N(d)*d)
		}
		for _, n := range ns {
			if got, want := v.Div(n), n/d; got != want {
				t.Fatalf("New(%d).Div(%d) = %d, want %d", d, n, got, want)
			}
		}
	}
}

func TestZeroPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(0) did not panic")
		}
	}()
	New(0)
}

func BenchmarkDiv(b *testing.B) {
	v := New(1000)
	d := uint64(1000)
	n := uint64(1_764_000_000_123)
	var sink uint64
	b.Run("fastdiv", func(b *testing.B) {
		for b.Loop() {
			sink += v.Div(n + sink&1)
		}
	})
	b.Run("hardware", func(b *testing.B) {
		for b.Loop() {
			sink += (n + sink&1) / d
		}
	})
	_ = sink
}
