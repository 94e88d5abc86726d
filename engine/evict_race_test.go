package engine

import (
	"fmt"
	"sync"
	satomic "sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/stretchr/testify/require"
)

// TestEvictStalestRacingALoweredLimit checks the EvictStalest rule (docs/design.md, "At the cap:
// EvictStalest") where it meets TakeWithLimit concurrently: a key holding half its own per-key
// limit or more is never evicted, even when its limit is the lowest yet given and arrives while
// other requests at the cap are choosing a victim.
//
// Limit-holders each take exactly half of a fresh per-key limit, two below the lowest given so
// far: against their own limit they are protected, against the previous lowest they would be
// evictable (2·L/2 < L+2). Flooders keep the limiter at its cap with new keys of cost 1, evicting
// one another (a count of 1 is below half of any limit used here) and sampling the holders. An
// eviction that judged a holder with the limit it read before the holder lowered it, but sampled
// the holder's cell after its take, forgets L/2 units the holder was admitted and lets it take
// them again in the same window. The clock stands still within a phase, so at the phase's end
// every admitted holder must still be tracked with its count; between phases it moves a window on,
// so that the holders of the last phase become evictable and the cap keeps churning.
func TestEvictStalestRacingALoweredLimit(t *testing.T) {
	const (
		policyLimit = 1 << 20
		holders     = 2  // goroutines taking with new, lower per-key limits
		flooders    = 6  // goroutines sending new keys of cost 1
		perHolder   = 4  // new limit-holders per holder goroutine per phase
		perFlooder  = 64 // new keys per flooder goroutine per phase
		maxKeys     = 16
	)
	// Without the re-check in evictStalest every run with two Ps or more failed within its first
	// ten phases; with one P the interleaving needs a preemption at that very point, and it passes.
	phases := 100
	if testing.Short() {
		phases = 30
	}
	for _, p := range []policy.Policy{
		policy.FixedWindow{Limit: policyLimit, Window: time.Hour},
		policy.SlidingCounter{Limit: policyLimit, Window: time.Hour},
	} {
		t.Run(p.ID(), func(t *testing.T) {
			clk := clock.NewManual(start)
			l, err := New(p, WithClock(clk), WithShards(1), WithMaxKeys(maxKeys), WithAtCap(EvictStalest),
				WithSweepInterval(time.Hour))
			require.NoError(t, err)
			defer l.Close()
			var nextLimit satomic.Int64 // limits fall by 2 from the policy's, one per holder
			nextLimit.Store(policyLimit)
			var nextKey satomic.Uint64
			type holder struct {
				key          string
				limit, count int64
			}
			for phase := range phases {
				var (
					wg       sync.WaitGroup
					mu       sync.Mutex
					admitted []holder
					begin    = make(chan struct{})
				)
				for range flooders {
					wg.Go(func() {
						<-begin
						// A fixed count, not a spin until the holders finish: with one P a spinning
						// flooder would hold it for whole preemption slices.
						for range perFlooder {
							l.TakeKey(nextKey.Add(1), 1)
						}
					})
				}
				for g := range holders {
					wg.Go(func() {
						<-begin
						for i := range perHolder {
							limit := nextLimit.Add(-2)
							h := holder{fmt.Sprintf("holder-%d-%d-%d", phase, g, i), limit, limit / 2}
							if l.TakeWithLimit(h.key, h.count, h.limit).Allowed {
								mu.Lock()
								admitted = append(admitted, h)
								mu.Unlock()
							}
						}
					})
				}
				close(begin)
				wg.Wait()
				for _, h := range admitted {
					pr, tracked := l.Inspect(h.key)
					require.True(t, tracked, "phase %d: %s, admitted %d of its limit %d, was evicted", phase, h.key, h.count, h.limit)
					require.Equal(t, h.count, pr.Count+pr.Estimate, "phase %d: %s lost units", phase, h.key)
				}
				clk.Advance(time.Hour)
			}
		})
	}
}

// TestKeyCapRacingTwoWordCells floods a small key cap with new keys from several goroutines while
// others renew their keys and the clock moves, for two-word cells (a limit above 2^21) under both
// choices at the cap: the cap holds, and under -race with -tags purego (where a pair is written
// under a striped lock) the reclaim's filter, which reads a cell's first word without that lock,
// must not race with the pair's writes (scripts/test runs it so).
func TestKeyCapRacingTwoWordCells(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingCounter{Limit: 1 << 22, Window: time.Hour},
		policy.TokenBucket{Rate: 1, Burst: 1<<32 - 1},
	} {
		for _, atCap := range []AtCap{RefuseNewKeys, EvictStalest} {
			for _, shards := range []int{1, 8} {
				t.Run(fmt.Sprintf("%s/atCap=%d/shards=%d", p.ID(), atCap, shards), func(t *testing.T) {
					const maxKeys, workers, per = 37, 8, 400
					clk := clock.NewManual(1_700_000_000_000)
					l, err := New(p, WithClock(clk), WithShards(shards), WithMaxKeys(maxKeys), WithAtCap(atCap), WithSweepInterval(time.Hour))
					require.NoError(t, err)
					defer l.Close()
					var over satomic.Int64
					var wg sync.WaitGroup
					for w := range workers {
						wg.Go(func() {
							out := make([]bool, 4)
							for i := range per {
								k := uint64(w*100_000 + i)
								switch i % 4 {
								case 0:
									l.TakeKey(k, 1)
								case 1:
									l.AllowKey(k, 0)
								case 2:
									l.AllowKeyBatch([]uint64{k, k + 50_000, k, 7}, 1, out)
								case 3:
									if w == 0 {
										clk.Advance(time.Millisecond)
									}
									l.AllowKey(uint64(i%5), 1) // keys every worker renews
								}
								if l.Len() > maxKeys {
									over.Add(1)
								}
							}
						})
					}
					wg.Wait()
					require.Zero(t, over.Load(), "Len went past the cap")
					require.LessOrEqual(t, l.Len(), maxKeys)
				})
			}
		}
	}
}
