package engine

import (
	"strconv"
	"sync"
	satomic "sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

// TestRefundRacingALaterAdmission: a refund racing an admission made at a later time (another
// goroutine moved the clock on) refunds as of that later time, so the key never holds more than a
// bucket that never saw the refunded request: 7 tokens, at Rate 1000 and Burst 10, after a take of
// 5 refunded whole and a take of 3 three milliseconds on. GCRA's state keeps no time, and a refund
// that read the clock before it loaded the cell gave back up to Rate x 3ms too much (about one
// trial in 8,000 here).
func TestRefundRacingALaterAdmission(t *testing.T) {
	trials := 50_000
	if raceOn {
		trials = 2_000
	}
	for _, p := range []policy.Policy{policy.GCRA{Rate: 1000, Burst: 10}, policy.TokenBucket{Rate: 1000, Burst: 10}, policy.LeakyBucket{Rate: 1000, Capacity: 10}} {
		t.Run(p.ID(), func(t *testing.T) {
			clk := clock.NewManual(start)
			l, err := New(p, WithClock(clk), WithEviction(false))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var refund, take satomic.Int64
			var wg sync.WaitGroup
			for i := range trials {
				k := strconv.Itoa(i)
				d := l.Take(k, 5)
				wg.Add(2)
				go func() {
					defer wg.Done()
					for refund.Load() != int64(i+1) {
					}
					l.Refund(k, 5, d)
				}()
				go func() {
					defer wg.Done()
					for take.Load() != int64(i+1) {
					}
					clk.Advance(3 * time.Millisecond)
					l.Take(k, 3)
				}()
				take.Store(int64(i + 1))
				refund.Store(int64(i + 1))
				wg.Wait()
				pr, _ := l.Inspect(k)
				held := pr.Tokens
				if _, leaky := p.(policy.LeakyBucket); leaky {
					held = 10 - pr.Level // room left in the bucket
				}
				if held > 7 {
					t.Fatalf("trial %d: the key holds %d units, above the 7 of a bucket that never saw the refunded request", i, held)
				}
			}
		})
	}
}
