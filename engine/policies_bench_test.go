package engine

import (
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/policy"
)

// benchPolicies are the configurations the per-policy benchmarks run. Where the policy allows it,
// the limit is one that no benchmark reaches, so that every decision is an admission that writes
// its cell (the dearer path), in the policy's one-word cell. Two exceptions: the sliding log's
// limit is at most 10,000 and its state grows with it, so it runs a login-like 100 a second (the
// hot key is then refused after its first 100 in each second: a lock, an expiry and a compare);
// and the dual bucket admits every call only at rates that need its two-word cell. Each reports
// the share of its calls that were admitted (admit/op).
var benchPolicies = []struct {
	name string
	p    policy.Policy
}{
	{"sliding-counter", policy.SlidingCounter{Limit: 1 << 20, Window: time.Second}},
	{"sliding-log", policy.SlidingLog{Limit: 100, Window: time.Second}},
	{"fixed-window", policy.FixedWindow{Limit: math.MaxUint32, Window: time.Second}},
	{"token-bucket", policy.TokenBucket{Rate: math.MaxUint32, Burst: math.MaxUint32}},
	{"gcra", policy.GCRA{Rate: math.MaxUint32, Burst: math.MaxUint32}},
	{"leaky-bucket", policy.LeakyBucket{Rate: math.MaxUint32, Capacity: math.MaxUint32}},
	{"dual-bucket", policy.DualBucket{RequestsPerMin: math.MaxUint32, TokensPerMin: math.MaxUint32}},
}

// warmLimiters builds one limiter per policy holding the 1M keys of keyNames, once per benchmark
// run (inserting 1M keys takes longer than measuring), and closes them when b ends.
func warmLimiters(b *testing.B) func(name string, p policy.Policy) *Limiter {
	cache := map[string]*Limiter{}
	b.Cleanup(func() {
		for _, l := range cache {
			l.Close()
		}
	})
	return func(name string, p policy.Policy) *Limiter {
		if l, ok := cache[name]; ok {
			return l
		}
		l, err := New(p, WithEviction(false))
		if err != nil {
			b.Fatal(err)
		}
		warm(l)
		cache[name] = l
		return l
	}
}

func newPolicyBench(b *testing.B, p policy.Policy) *Limiter {
	b.Helper()
	l, err := New(p, WithEviction(false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkPolicies runs Allow for every policy: one hot key, and 1M keys drawn uniformly.
//
//	go test ./engine/ -run '^$' -bench 'BenchmarkPolicies' -benchtime=2000000x -count=5 -cpu=1
func BenchmarkPolicies(b *testing.B) {
	warmed := warmLimiters(b)
	idx := uniformIndexes()
	for _, c := range benchPolicies {
		b.Run("policy="+c.name+"/keys=1", func(b *testing.B) {
			l := newPolicyBench(b, c.p)
			admitted := 0
			b.ReportAllocs()
			for b.Loop() {
				if l.Allow("hot") {
					admitted++
				}
			}
			b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
		})
		b.Run("policy="+c.name+"/keys=1M", func(b *testing.B) {
			l := warmed(c.name, c.p)
			admitted, i := 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if l.Allow(keyNames[idx[i&(len(idx)-1)]]) {
					admitted++
				}
				i++
			}
			b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
		})
	}
}

// BenchmarkPoliciesParallel is BenchmarkPolicies with RunParallel.
func BenchmarkPoliciesParallel(b *testing.B) {
	warmed := warmLimiters(b)
	idx := uniformIndexes()
	for _, c := range benchPolicies {
		b.Run("policy="+c.name+"/keys=1", func(b *testing.B) {
			l := newPolicyBench(b, c.p)
			var admitted atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := int64(0)
				for pb.Next() {
					if l.Allow("hot") {
						n++
					}
				}
				admitted.Add(n)
			})
			b.ReportMetric(float64(admitted.Load())/float64(b.N), "admit/op")
		})
		b.Run("policy="+c.name+"/keys=1M", func(b *testing.B) {
			l := warmed(c.name, c.p)
			var admitted atomic.Int64
			var seed atomic.Uint32
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seed.Add(1) * 7919)
				n := int64(0)
				for pb.Next() {
					if l.Allow(keyNames[idx[i&(len(idx)-1)]]) {
						n++
					}
					i++
				}
				admitted.Add(n)
			})
			b.ReportMetric(float64(admitted.Load())/float64(b.N), "admit/op")
		})
	}
}

// BenchmarkPolicyBytesPerKey reports the heap one tracked key costs (B/key): the growth of the live
// heap after GC when 1M integer keys are inserted (the engine keeps no key strings), divided by
// 1M. The wide rows are configurations that need two-word cells, and the sliding log's rows show
// its ring growing with the limit (4 bytes a unit, plus the allocator's rounding).
//
//	go test ./engine/ -run '^$' -bench 'BenchmarkPolicyBytesPerKey' -benchtime=1x
func BenchmarkPolicyBytesPerKey(b *testing.B) {
	rows := append([]struct {
		name string
		p    policy.Policy
	}{}, benchPolicies...)
	rows = append(rows, []struct {
		name string
		p    policy.Policy
	}{
		{"sliding-log/limit=10", policy.SlidingLog{Limit: 10, Window: time.Second}},
		{"sliding-log/limit=1000", policy.SlidingLog{Limit: 1000, Window: time.Second}},
		{"token-bucket/wide", policy.TokenBucket{Rate: 1, Burst: math.MaxUint32}},
		{"leaky-bucket/wide", policy.LeakyBucket{Rate: 1, Capacity: math.MaxUint32}},
		{"dual-bucket/500rpm-30000tpm", policy.DualBucket{RequestsPerMin: 500, TokensPerMin: 30_000}},
	}...)
	const keys = 1 << 20
	for _, c := range rows {
		b.Run("policy="+c.name, func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			l, err := New(c.p, WithEviction(false))
			if err != nil {
				b.Fatal(err)
			}
			for i := range uint64(keys) {
				l.AllowKey(i, 1)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			if l.Len() != keys {
				b.Fatalf("%d keys tracked, want %d", l.Len(), keys)
			}
			for b.Loop() {
				l.AllowKey(uint64(b.N)%keys, 1) // keeps l live past the reading
			}
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/keys, "B/key")
			l.Close()
		})
	}
}
