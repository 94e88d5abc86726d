package engine

import (
	"hash/maphash"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/policy"
)

// The benchmarks run the sliding counter at a limit no workload reaches, so every decision is an
// admission that writes its cell: the dearer path.
var benchPolicy = policy.SlidingCounter{Limit: 1 << 20, Window: time.Second}

const benchKeys = 1 << 20

func newBench(b *testing.B) *Limiter {
	b.Helper()
	l, err := New(benchPolicy, WithEviction(false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// keyNames are the string keys of the many-key workloads, made once so that their cost is not
// measured.
var keyNames = func() []string {
	s := make([]string, benchKeys)
	for i := range s {
		s[i] = "client-" + strconv.Itoa(i)
	}
	return s
}()

// zipfIndexes is a fixed sequence of key indexes drawn from a Zipf distribution (s = 1.1): a
// few hot keys and a long tail, as client traffic is.
var zipfIndexes = func() []uint32 {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, benchKeys-1)
	s := make([]uint32, 1<<16)
	for i := range s {
		s[i] = uint32(z.Uint64())
	}
	return s
}()

func uniformIndexes() []uint32 {
	r := rand.New(rand.NewPCG(3, 4))
	s := make([]uint32, 1<<16)
	for i := range s {
		s[i] = uint32(r.IntN(benchKeys))
	}
	return s
}

func warm(l *Limiter) {
	for _, k := range keyNames {
		l.Allow(k)
	}
}

func BenchmarkAllow(b *testing.B) {
	b.Run("keys=1", func(b *testing.B) {
		l := newBench(b)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow("hot")
		}
	})
	for _, w := range []struct {
		name string
		idx  []uint32
	}{{"keys=1M/uniform", uniformIndexes()}, {"keys=1M/zipf", zipfIndexes}} {
		b.Run(w.name, func(b *testing.B) {
			l := newBench(b)
			warm(l)
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				l.Allow(keyNames[w.idx[i&(len(w.idx)-1)]])
				i++
			}
		})
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	b.Run("keys=1", func(b *testing.B) {
		l := newBench(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow("hot")
			}
		})
	})
	for _, w := range []struct {
		name string
		idx  []uint32
	}{{"keys=1M/uniform", uniformIndexes()}, {"keys=1M/zipf", zipfIndexes}} {
		b.Run(w.name, func(b *testing.B) {
			l := newBench(b)
			warm(l)
			b.ReportAllocs()
			b.ResetTimer()
			var start uint32
			b.RunParallel(func(pb *testing.PB) {
				i := int(start * 7919)
				start++
				for pb.Next() {
					l.Allow(keyNames[w.idx[i&(len(w.idx)-1)]])
					i++
				}
			})
		})
	}
}

func BenchmarkAllowKey(b *testing.B) {
	l := newBench(b)
	for i := range uint64(benchKeys) {
		l.AllowKey(i, 1)
	}
	idx := uniformIndexes()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		l.AllowKey(uint64(idx[i&(len(idx)-1)]), 1)
		i++
	}
}

// BenchmarkWide measures the two-word cell used for limits of 2^21 and above.
func BenchmarkWide(b *testing.B) {
	l, err := New(policy.SlidingCounter{Limit: math.MaxUint32, Window: time.Second}, WithEviction(false))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ReportAllocs()
	for b.Loop() {
		l.Allow("hot")
	}
}

var hashSink uint64

// BenchmarkHash compares the engine's string hash with hash/maphash.String, which computes the
// same function (the runtime's memhash) through three more calls.
func BenchmarkHash(b *testing.B) {
	l := newBench(b)
	seed := maphash.MakeSeed()
	for _, k := range []string{"10.1.2.3", "client-123456", "user:0123456789abcdef0123456789abcdef"} {
		b.Run("engine/len="+strconv.Itoa(len(k)), func(b *testing.B) {
			for b.Loop() {
				hashSink += l.hashString(k)
			}
		})
		b.Run("maphash/len="+strconv.Itoa(len(k)), func(b *testing.B) {
			for b.Loop() {
				hashSink += maphash.String(seed, k)
			}
		})
	}
}
