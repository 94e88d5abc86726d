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

// TestDiv62MatchesHardware checks Div62 over the dividends it promises, below 2^62, against the
// hardware division: the edges around 2^62 and around multiples of d, and random values.
func TestDiv62MatchesHardware(t *testing.T) {
	const top = uint64(1)<<62 - 1
	divisors := []uint64{1, 2, 3, 4, 5, 7, 10, 60, 100, 641, 1000, 1001, 60_000, 86_400_000,
		2_592_000_000, 1<<31 - 1, 1 << 31, 1<<32 + 1, 1<<61 + 1, 1<<62 - 1, 1 << 62, 1<<62 + 1,
		1<<63 - 1, 1 << 63, 1<<63 + 1, math.MaxUint64}
	r := rand.New(rand.NewPCG(13, 17))
	for range 2000 {
		divisors = append(divisors, r.Uint64N(1<<33)+1, r.Uint64N(top)+1, r.Uint64()|1)
	}
	for _, d := range divisors {
		v := New(d)
		ns := []uint64{0, 1, top, top - 1, 1 << 61, 1 << 41}
		if d <= top {
			ns = append(ns, d-1, d, d+1, top/d*d, top/d*d-1)
		}
		for range 200 {
			ns = append(ns, r.Uint64N(top+1), r.Uint64N(1<<42), r.Uint64N(top/d+1)*d, r.Uint64N(top/d+1)*d-1)
		}
		for _, n := range ns {
			if n > top {
				continue // r.Uint64N(...)*d - 1 wrapped below zero
			}
			if got, want := v.Div62(n), n/d; got != want {
				t.Fatalf("New(%d).Div62(%d) = %d, want %d", d, n, got, want)
			}
		}
	}
}

// FuzzDiv62 compares Div62 with the hardware division for any divisor and any dividend below 2^62.
func FuzzDiv62(f *testing.F) {
	f.Add(uint64(1000), uint64(1_764_000_000_123))
	f.Add(uint64(3), uint64(1)<<62-1)
	f.Add(uint64(1)<<62+1, uint64(1)<<62-1)
	f.Add(uint64(math.MaxUint64), uint64(12345))
	f.Fuzz(func(t *testing.T, d, n uint64) {
		if d == 0 {
			return
		}
		n &= 1<<62 - 1
		v := New(d)
		if got, want := v.Div62(n), n/d; got != want {
			t.Fatalf("New(%d).Div62(%d) = %d, want %d", d, n, got, want)
		}
	})
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
