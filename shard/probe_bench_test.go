package shard

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"
)

// BenchmarkProbeLines measures what a lookup of a tracked key touches in a table filled the way
// the engine fills it (random 64-bit hashes; rebuilds at 7/8 to a 4/5 load): slots probed, and
// cache lines from the home slot's line to the key's own, the first touch of each being a miss
// when the table is not cached, and the share of keys within nearSlots of their home, which Find
// finds without a mispredicted branch. It reports these figures; its ns/op is only the loop's cost.
func BenchmarkProbeLines(b *testing.B) {
	const line = unsafe.Sizeof([8]uint64{})
	for _, keys := range []int{1 << 14, 1 << 16} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			s, cfg := newShard(b, 10, false)
			r := rand.New(rand.NewPCG(uint64(keys), 1))
			hs := make([]uint64, keys)
			for i := range hs {
				hs[i] = r.Uint64() | 1
				s.Acquire(cfg, hs[i], now)
			}
			t := s.Table()
			lineOf := func(i uint64) uintptr { return uintptr(unsafe.Pointer(t.keyAt(i))) / line }
			var probes, lines, multi, near float64
			for b.Loop() {
				probes, lines, multi, near = 0, 0, 0, 0
				for _, h := range hs {
					i, found := t.slot(h)
					if !found {
						b.Fatalf("key %x not found", h)
					}
					j, l, last := t.home(h), 1.0, lineOf(t.home(h))
					probes++
					for ; j != i; probes++ {
						if j++; j == t.n {
							j = 0
						}
						if lineOf(j) != last {
							l, last = l+1, lineOf(j)
						}
					}
					lines += l
					if (i+t.n-t.home(h))%t.n < nearSlots {
						near++
					}
					if l > 1 {
						multi++
					}
				}
			}
			n := float64(len(hs))
			b.ReportMetric(n/float64(t.n), "load")
			b.ReportMetric(probes/n, "slots/lookup")
			b.ReportMetric(lines/n, "lines/lookup")
			b.ReportMetric(multi/n, "multi-line-share")
			b.ReportMetric(near/n, "near-share")
		})
	}
}

// BenchmarkAbsentProbeLines measures what an insert's probe touches: for keys absent from a table
// filled as BenchmarkProbeLines fills it, the cache lines from the home slot's line to the line
// of the empty slot where the probe ends (where the key would go). It reports the mean, and the
// share of probes that end within 1, 2, 4 and 8 lines: how far a fixed number of prefetched
// lines reaches, and so why AllowBatch walks a flood's probes in stages (Run.Walk). Its ns/op is
// only the loop's cost.
func BenchmarkAbsentProbeLines(b *testing.B) {
	const line = unsafe.Sizeof([8]uint64{})
	for _, keys := range []int{1 << 14, 1 << 16} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			s, cfg := newShard(b, 10, false)
			r := rand.New(rand.NewPCG(uint64(keys), 2))
			for range keys {
				s.Acquire(cfg, r.Uint64()|1, now)
			}
			t := s.Table()
			absent := make([]uint64, 1<<14)
			for i := range absent {
				absent[i] = r.Uint64() | 1 // 2^-50 odds of one being in the table: none is, in practice
			}
			var lines float64
			var within [4]float64 // 1, 2, 4, 8 lines
			for b.Loop() {
				lines, within = 0, [4]float64{}
				for _, h := range absent {
					i, found := t.slot(h)
					if found {
						b.Fatalf("key %x is in the table", h)
					}
					first := uintptr(unsafe.Pointer(t.keyAt(t.home(h)))) / line
					last := uintptr(unsafe.Pointer(t.keyAt(i))) / line
					l := float64(last - first + 1)
					if i < t.home(h) { // wrapped past the last slot
						l = float64(uintptr(unsafe.Pointer(t.keyAt(t.n-1)))/line-first+1) + float64(last-uintptr(unsafe.Pointer(t.keyAt(0)))/line+1)
					}
					lines += l
					for k, m := range []float64{1, 2, 4, 8} {
						if l <= m {
							within[k]++
						}
					}
				}
			}
			n := float64(len(absent))
			b.ReportMetric(float64(keys)/float64(t.n), "load")
			b.ReportMetric(lines/n, "lines/insert")
			b.ReportMetric(within[0]/n, "within-1-line")
			b.ReportMetric(within[1]/n, "within-2-lines")
			b.ReportMetric(within[2]/n, "within-4-lines")
			b.ReportMetric(within[3]/n, "within-8-lines")
		})
	}
}
