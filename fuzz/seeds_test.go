package fuzz

import (
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/slidelimit/slidelimit/internal/reference"
)

// The hand-made seeds, encoded in the input format of decode_test.go and concurrent_test.go.
// They are committed under testdata/fuzz/<FuzzName>/, where `go test` runs them as regression
// tests of every target; TestSeedsCommitted keeps the files equal to what is written here, and
// TestSeedsCoverRules proves that together they reach every rule the decoder can aim at.
// After changing the input format or a seed: go test ./fuzz/ -run TestSeedsCommitted -write-seeds

var writeSeeds = flag.Bool("write-seeds", false, "write the hand-made seed corpora under testdata/fuzz")

// Encoders for the decoder's classes. Each returns the class byte and its payload.

func le(v int64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

func cat(parts ...[]byte) []byte { return slices.Concat(parts...) }

// Parameters.
func pTiny(v int64) []byte             { return []byte{countTiny, byte(v - 1)} } // 1 … 8
func pByte(v int64) []byte             { return []byte{countByte, byte(v - 1)} } // 1 … 256
func pNearHi(d byte) []byte            { return []byte{countNearHi, d} }
func pPow2(exp byte, delta int) []byte { return []byte{countPow2 | byte(delta+1)<<3, exp} }
func pRound(v int64) []byte            { return []byte{countRound, byte(slices.Index(roundCounts[:], v))} }
func pHi() []byte                      { return []byte{countHi} }

// Start times.
func tZero() []byte           { return []byte{startZero} }
func tEpoch(off int64) []byte { return cat([]byte{startEpoch}, le(off, 2)) }
func tEdgeMinus() []byte      { return []byte{startEdgeMinus} }
func tFar() []byte            { return cat([]byte{startFar}, le(0, 2)) }
func tHuge() []byte           { return []byte{startHuge} }

// Time steps.
func sZero() []byte              { return []byte{stepZero} }
func sSmall(n int64) []byte      { return []byte{stepSmall, byte(n - 1)} } // 1 … 16
func sEdge() []byte              { return []byte{stepEdge} }
func sEdgeMinus() []byte         { return []byte{stepEdgeMinus} }
func sEdgePlus() []byte          { return []byte{stepEdgePlus} }
func sPeriods(k, off int) []byte { return []byte{stepPeriods, byte(k - 1), byte(off + 1)} } // k 1 … 3, off -1 … 1
func sPast31(extra int64) []byte { return cat([]byte{stepPast31}, le(extra, 2)) }
func sU32(v int64) []byte        { return cat([]byte{stepU32}, le(v, 4)) }
func sShift(s byte) []byte       { return []byte{stepShift, s} }
func sRetry(off int) []byte      { return []byte{stepRetry, byte(off + 1)} } // off -1 … 1

// Costs.
func kZero() []byte         { return []byte{costZero} }
func kOne() []byte          { return []byte{costOne} }
func kSmall(n int64) []byte { return []byte{costSmall, byte(n - 2)} } // 2 … 5
func kLeft() []byte         { return []byte{costLeft} }
func kLeftPlus() []byte     { return []byte{costLeftPlus} }
func kLeftMinus() []byte    { return []byte{costLeftMinus} }
func kCap() []byte          { return []byte{costCap} }
func kCapPlus() []byte      { return []byte{costCapPlus} }
func kU32(v int64) []byte   { return cat([]byte{costU32}, le(v, 4)) }
func kMax() []byte          { return []byte{costMax} }
func kNeg() []byte          { return []byte{costNeg} }
func kMinInt64() []byte     { return []byte{costNeg + 120} } // still costNeg mod 12, top bit set
func kOne2() []byte         { return []byte{costOne2} }
func flags(evict bool, shardLog byte) byte {
	f := shardLog << 1
	if evict {
		f |= 1
	}
	return f
}

// Ops, keys by index into keys.
func allow(key int, step, cost []byte) []byte { return cat([]byte{byte(key << 3)}, step, cost) }
func retry(key int, step []byte) []byte       { return cat([]byte{callRetry | byte(key<<3)}, step) }
func probeOp(key, which int, step []byte) []byte {
	return cat([]byte{callProbe | byte(key<<3) | byte(which<<6)}, step)
}
func size(step []byte) []byte { return cat([]byte{callSize}, step) }

// everyProbe is one probe op per probe the target answers.
func everyProbe(tg *target, key int, step []byte) []byte {
	var b []byte
	for i := range reference.Probes(tg.id) {
		b = cat(b, probeOp(key, i, step))
		step = sZero()
	}
	return b
}

// small returns modest parameters for tg: a window policy's limit and window, a bucket's rate and
// size, chosen so that a few unit requests reach the limit.
func small(tg *target) (p1, p2 []byte) {
	switch tg.params[0] {
	case "limit":
		return pTiny(3), pRound(1000)
	case "requestsPerMin":
		return pTiny(3), pRound(100)
	}
	return pByte(10), pTiny(3) // 10 per second, 3 at most: fillMs 300
}

// serialSeeds are each serial target's hand-made seeds, by file name.
func serialSeeds(tg *target) map[string][]byte {
	p1, p2 := small(tg)
	fill := cat(allow(1, sZero(), kOne()), allow(1, sSmall(1), kOne()), allow(1, sSmall(2), kOne2()), allow(1, sZero(), kOne()))
	return map[string][]byte{
		// Fill a key, then every call on it: cost 0 while full, a cost above the capacity, a
		// negative cost, retry-after and the probes, and a request made exactly retry-after later.
		"basic": cat([]byte{flags(false, 0), 1}, p1, p2, tEpoch(123), fill,
			allow(1, sZero(), kZero()), allow(1, sZero(), kCapPlus()), allow(1, sZero(), kNeg()),
			allow(1, sZero(), kMinInt64()), retry(1, sZero()), everyProbe(tg, 1, sZero()), size(sZero()),
			allow(1, sRetry(-1), kOne()), allow(1, sRetry(0), kOne()), retry(1, sZero()),
			allow(2, sZero(), kCap()), allow(2, sZero(), kZero()), everyProbe(tg, 2, sZero()),
			retry(0, sZero()), everyProbe(tg, 0, sZero()), size(sZero())),
		// The window edges: the last ms of a window, the edge, edge + 1 ms, one window on, a gap
		// of two windows (which clears a sliding counter), and retry-after ± 1 ms.
		"edges": cat([]byte{flags(false, 1), 2}, p1, p2, tEdgeMinus(), fill,
			allow(1, sEdgeMinus(), kOne()), retry(1, sZero()), allow(1, sEdge(), kOne()), everyProbe(tg, 1, sZero()),
			allow(1, sEdgePlus(), kLeft()), retry(1, sZero()), allow(1, sEdgePlus(), kOne()),
			allow(1, sPeriods(1, 0), kLeft()), retry(1, sZero()), everyProbe(tg, 1, sZero()),
			allow(1, sPeriods(1, -1), kOne()), allow(1, sPeriods(1, 1), kLeftPlus()),
			allow(1, sPeriods(2, 0), kLeft()), everyProbe(tg, 1, sZero()), allow(1, sPeriods(2, -1), kOne()),
			allow(1, sPeriods(3, 1), kLeftMinus()), allow(1, sRetry(1), kOne()), allow(1, sRetry(-1), kOne()),
			retry(1, sZero()), allow(1, sRetry(0), kOne()), size(sZero())),
		// Every parameter at its maximum: costs of exactly what is left, one more, one less, the
		// capacity, and beyond; jumps past 2^31 ms and far multi-period jumps.
		"extremes-max": cat([]byte{flags(false, 2), 3}, pHi(), pHi(), tEdgeMinus(),
			allow(0, sZero(), kLeftMinus()), allow(0, sZero(), kLeftPlus()), allow(0, sZero(), kLeft()),
			allow(0, sZero(), kOne()), retry(0, sZero()), everyProbe(tg, 0, sZero()),
			allow(0, sEdgePlus(), kCap()), allow(0, sZero(), kCapPlus()), allow(0, sZero(), kMax()),
			allow(0, sPast31(7), kU32(1<<32-1)), retry(0, sZero()), everyProbe(tg, 0, sZero()),
			allow(3, sSmall(1), kLeft()), allow(3, sU32(1<<32-1), kLeftPlus()), retry(3, sZero()),
			allow(3, sRetry(0), kOne()), allow(3, sShift(1), kLeft()), everyProbe(tg, 3, sZero()),
			allow(3, sShift(32), kLeft()), retry(3, sZero()), everyProbe(tg, 3, sZero()), size(sZero())),
		// Near the maximum, and one below a power of two (where packed layouts change).
		"extremes-near": cat([]byte{flags(false, 0), 4}, pNearHi(1), pPow2(21, -1), tFar(),
			allow(0, sZero(), kLeft()), allow(0, sSmall(16), kOne()), retry(0, sZero()),
			allow(0, sEdge(), kLeftMinus()), allow(0, sPeriods(1, 1), kLeft()), everyProbe(tg, 0, sZero()),
			allow(1, sZero(), kSmall(5)), allow(1, sShift(16), kLeft()), retry(1, sZero()),
			allow(1, sPast31(0), kOne()), everyProbe(tg, 1, sZero()), size(sZero())),
		// Every parameter at 1: a 1 ms window, a rate of one per second with a bucket of one.
		"extremes-min": cat([]byte{flags(false, 0), 5}, pTiny(1), pTiny(1), tZero(),
			allow(0, sZero(), kOne()), allow(0, sZero(), kOne()), retry(0, sZero()), allow(0, sEdge(), kOne()),
			allow(0, sEdgePlus(), kSmall(2)), allow(0, sZero(), kZero()), allow(0, sPeriods(2, 0), kOne()),
			allow(0, sRetry(0), kOne()), allow(0, sRetry(-1), kOne()), everyProbe(tg, 0, sZero()),
			allow(0, sSmall(16), kCap()), retry(0, sZero()), size(sZero())),
		// Eviction on, one shard: four keys filled and left to die for two periods, then four new
		// keys fill the shard's 8-slot table, and the insert that rebuilds it drops the dead ones;
		// they must then read, and decide, as new keys, and come back when used again.
		"eviction-rebuild": cat([]byte{flags(true, 0), 6}, p1, p2, tEpoch(0),
			allow(0, sZero(), kOne()), allow(1, sZero(), kLeft()), allow(2, sZero(), kCapPlus()), allow(3, sSmall(1), kOne()),
			size(sZero()), retry(1, sZero()), allow(4, sPeriods(2, 1), kOne()), allow(5, sZero(), kLeft()),
			allow(6, sZero(), kOne()), size(sZero()), allow(7, sSmall(1), kSmall(2)), size(sZero()),
			everyProbe(tg, 0, sZero()), everyProbe(tg, 1, sZero()), retry(1, sZero()), allow(1, sZero(), kLeft()),
			allow(2, sZero(), kOne()), size(sZero()), allow(1, sZero(), kOne()), everyProbe(tg, 1, sZero()), size(sZero())),
		// Eviction on, parameters whose packed cells wrap (a limit of 2^20, a rate of 2^20): jumps
		// past the cell's horizon make the next decision sweep the shard first, evicting the dead.
		"eviction-horizon": cat([]byte{flags(true, 0), 8}, pPow2(20, 0), pRound(1000), tEpoch(0),
			allow(0, sZero(), kOne()), allow(1, sZero(), kLeft()), allow(2, sZero(), kOne()), size(sZero()),
			allow(0, sU32(1<<32-1), kOne()), size(sZero()), everyProbe(tg, 1, sZero()), allow(1, sZero(), kLeft()),
			allow(3, sShift(32), kOne()), size(sZero()), everyProbe(tg, 0, sZero()), allow(2, sZero(), kOne()),
			allow(4, sShift(40), kOne()), size(sZero()), allow(0, sPast31(0), kLeft()), size(sZero())),
		// 128 shards, four keys interleaved, far from the epoch.
		"shards": cat([]byte{flags(false, 7), 7}, p1, p2, tHuge(),
			allow(0, sZero(), kOne()), allow(1, sZero(), kSmall(2)), allow(2, sSmall(3), kLeft()), allow(3, sZero(), kOne()),
			allow(0, sEdgePlus(), kLeft()), allow(1, sZero(), kOne()), retry(2, sZero()), size(sZero()),
			allow(2, sPeriods(2, 1), kLeftPlus()), allow(3, sU32(123_456), kOne()), everyProbe(tg, 3, sZero()),
			size(sZero())),
	}
}

// concurrentSeeds are each concurrent target's hand-made seeds, by file name.
func concurrentSeeds(tg *target) map[string][]byte {
	p1, p2 := small(tg)
	cflags := func(evict bool, shardLog byte, unit bool, k int) byte {
		f := flags(evict, shardLog) | byte(k-2)<<5
		if unit {
			f |= 0x10
		}
		return f
	}
	take := func(key int) []byte { return []byte{byte(key << 3)} }
	takeCost := func(key int, cost []byte) []byte { return cat(take(key), cost) }
	peek := func(key int) []byte { return []byte{callRetry | byte(key<<3)} }
	var hot, mixed, dying []byte
	for i := range 96 {
		hot = cat(hot, take(i%7/6)) // mostly key 0, some key 1
	}
	costs := [][]byte{kOne(), kSmall(2), kLeft(), kZero(), kCapPlus(), kLeftMinus(), kNeg(), kCap(), kU32(5)}
	for i := range 72 {
		if i%9 == 4 {
			mixed = cat(mixed, peek(i%4))
			continue
		}
		mixed = cat(mixed, takeCost(i%4, costs[i%len(costs)]))
	}
	for i := range 48 {
		dying = cat(dying, takeCost(i%4, costs[i%3]))
	}
	prefix := cat(allow(0, sZero(), kOne()), allow(0, sSmall(1), kOne()), allow(1, sZero(), kLeftMinus()),
		allow(2, sSmall(2), kCap()))
	return map[string][]byte{
		// Unit costs from 8 goroutines on one hot key: the total admitted is the budget.
		"unit-hot": cat([]byte{cflags(false, 0, true, 8), 1}, p1, p2, tEpoch(5), []byte{0}, sZero(), hot),
		// Mixed costs, peeks and four keys from 4 goroutines after some history, at edge + 1 ms.
		"mixed-history": cat([]byte{cflags(false, 2, false, 4), 2}, p1, p2, tEdgeMinus(), []byte{4}, prefix,
			sEdgePlus(), mixed),
		// Eviction on, one shard (inserts rebuild it), keys left to die for two periods first.
		"eviction": cat([]byte{cflags(true, 0, false, 3), 3}, p1, p2, tEpoch(0), []byte{4}, prefix,
			sPeriods(2, 1), dying),
		// Every parameter at its maximum: requests for exactly what is left race each other.
		"extremes": cat([]byte{cflags(false, 1, false, 6), 4}, pHi(), pHi(), tFar(), []byte{2},
			allow(0, sZero(), kLeftMinus()), allow(1, sZero(), kOne()), sPast31(1), mixed),
	}
}

// regressionSeeds are minimised findings, by target name and file name; each stays as a test.
func regressionSeeds() map[string]map[string][]byte {
	return map[string]map[string][]byte{
		"FuzzSlidingCounter": {
			// Limit 60000 (one-word cell, k = 30 bits of window index), window 2^32 ms: one request
			// at t = 0, then at t = 2^62, exactly 2^30 windows later, the engine reads the stored
			// index as the current window (estimate 1) and refuses a cost of 60000 that the model
			// admits. The codec's horizon is MaxInt64 because (2^29-4)*2^32 needs 62 bits, so no
			// sweep ever re-encodes the state before its window index wraps.
			"regress-sc-word-index-wraps": cat([]byte{flags(false, 0), 0}, pRound(60000), pHi(), tZero(),
				allow(0, sZero(), kOne()), allow(0, sShift(32), kLeft())),
		},
		"FuzzTokenBucket": {
			// Rate 1000, burst 2^32-1 (fillMs 2^32-1: the two-word cell), a new key's first request
			// at the top of the supported time range. At now = 2^62 (outside it, and so capped by
			// maxNow) the time stored in the cell reached the Moved flag and the request never
			// returned.
			"regress-tb-pair-at-max-time": cat([]byte{flags(false, 0), 0}, pRound(1000), pHi(), tZero(),
				allow(0, sShift(32), kOne())),
		},
		"FuzzLeakyBucket": {
			// The same with the leaky bucket's two-word cell (drainMs 2^32-1).
			"regress-lb-pair-at-max-time": cat([]byte{flags(false, 0), 0}, pRound(1000), pHi(), tZero(),
				allow(0, sShift(32), kOne())),
		},
		"FuzzGCRA": {
			// Rate 2^32-1, burst 1: one admitted request, then 2^32-1 ms (49.7 days) with no
			// decision in the shard. The model admits the next unit request; the engine refused it
			// with retry-after 3 ms: the stale TAT was judged, then read, more than
			// rules.GCRA.MaxIdleMs (2^31 ms here) after its last admission, so its lag wrapped.
			"regress-gcra-idle-past-maxidle": cat([]byte{flags(false, 0), 0}, pHi(), pTiny(1), tEpoch(0),
				allow(0, sZero(), kOne()), allow(0, sU32(1<<32-1), kOne())),
			"regress-gcra-idle-past-maxidle-evict": cat([]byte{flags(true, 0), 0}, pHi(), pTiny(1), tZero(),
				allow(0, sZero(), kOne()), retry(0, sU32(1<<32-1))),
		},
	}
}

// seedFiles maps every target's name to its seeds.
func seedFiles() map[string]map[string][]byte {
	names := map[*target]string{slidingCounter: "SlidingCounter", slidingLog: "SlidingLog",
		fixedWindow: "FixedWindow", tokenBucket: "TokenBucket", gcra: "GCRA", leakyBucket: "LeakyBucket",
		dualBucket: "DualBucket"}
	files := map[string]map[string][]byte{}
	for tg, name := range names {
		files["Fuzz"+name] = serialSeeds(tg)
		files["FuzzConcurrent"+name] = concurrentSeeds(tg)
	}
	for target, seeds := range regressionSeeds() {
		maps.Copy(files[target], seeds)
	}
	return files
}

// corpusFile is the file `go test` reads a []byte seed from.
func corpusFile(b []byte) []byte {
	return []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n")
}

func TestSeedsCommitted(t *testing.T) {
	for target, seeds := range seedFiles() {
		for name, b := range seeds {
			path := filepath.Join("testdata", "fuzz", target, name)
			want := corpusFile(b)
			if *writeSeeds {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != string(want) {
				t.Errorf("%s is missing or differs from seeds_test.go (err %v); rewrite the corpora with -write-seeds", path, err)
			}
		}
	}
}

// TestSeedsCoverRules runs each serial target's seeds and requires that together they reach
// every time step and cost class of the decoder, admit and refuse, call every call, and take each
// parameter to 1 and to its maximum, with eviction on (actually evicting) and off. Of each
// concurrent target's seeds it requires a key contended to its limit (some requests admitted,
// some refused), a serial-total comparison, eviction, and peeks.
func TestSeedsCoverRules(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tg := range allTargets {
		t.Run(tg.id, func(t *testing.T) {
			requireSupported(t, tg)
			var ft features
			for _, b := range serialSeeds(tg) {
				runSerial(t, tg, b, &ft)
			}
			for c, hit := range ft.steps {
				if !hit {
					t.Errorf("no seed takes a %q time step", stepNames[c])
				}
			}
			for c, hit := range ft.costs {
				if !hit {
					t.Errorf("no seed has a cost of class %d (decode_test.go)", c)
				}
			}
			calls := append([]string{"allow", "retryAfter", "stateSize"}, reference.Probes(tg.id)...)
			for _, call := range calls {
				if !ft.calls[call] {
					t.Errorf("no seed calls %s", call)
				}
			}
			if !ft.admitted || !ft.refused || !ft.eviction || !ft.noEvict || !ft.forgot || ft.minParam != [2]bool{true, true} || ft.maxParam != [2]bool{true, true} {
				t.Errorf("seeds reach: admitted %v, refused %v, eviction on %v, off %v, a key evicted %v, each parameter at 1 %v, at its maximum %v; want all",
					ft.admitted, ft.refused, ft.eviction, ft.noEvict, ft.forgot, ft.minParam, ft.maxParam)
			}
			var cf concurrentFeatures
			for _, b := range concurrentSeeds(tg) {
				runConcurrent(t, tg, b, &cf)
			}
			if !cf.contended || !cf.totals || !cf.eviction || !cf.peeks {
				t.Errorf("concurrent seeds reach: a contended key %v, a serial-total comparison %v, eviction %v, peeks %v; want all",
					cf.contended, cf.totals, cf.eviction, cf.peeks)
			}
		})
	}
}
