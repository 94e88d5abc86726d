package engine

// This file stands alone (it uses only New, WithClock, WithEviction, WithExpectedKeys, Allow,
// AllowKey and the manual clock), so that bench/scripts/instructions.sh can copy it into a
// checkout of an older commit and count both.

import (
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

// BenchmarkAllowSteady is Allow on one key in a steady state under a manual clock: the previous
// window counted and the current one half gone, so that every decision computes the carried
// count, whatever the machine's speed. That makes its instruction count repeatable under
// callgrind (see the README's performance section). cell=word runs the one-word cell (limit
// 2^21-1), cell=pair the two-word one (limit 2^30). The clock moves on one window every 2^19
// decisions, so that no run reaches the limit.
func BenchmarkAllowSteady(b *testing.B) {
	for _, c := range []struct {
		name  string
		limit int64
	}{{"word", 1<<21 - 1}, {"pair", 1 << 30}} {
		b.Run("cell="+c.name, func(b *testing.B) {
			clk := clock.NewManual(1_764_000_000_000)
			l, err := New(policy.SlidingCounter{Limit: c.limit, Window: time.Second}, WithClock(clk), WithEviction(false))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			for range 1000 {
				l.Allow("hot")
			}
			clk.Advance(1500 * time.Millisecond)
			b.ReportAllocs()
			steadyLoop(b, l, clk)
		})
	}
}

func steadyLoop(b *testing.B, l *Limiter, clk *clock.Clock) {
	i := 0
	for b.Loop() {
		if i++; i&(1<<19-1) == 0 {
			clk.Advance(time.Second)
		}
		if !l.Allow("hot") {
			b.Fatalf("refused after %d decisions", i)
		}
	}
}

// insertKeys is how many keys BenchmarkInsertSteady's limiter holds before it is timed. Its tables
// are sized for them at a load of 0.8 and grow at 7/8, so a run of up to 24,000 inserts grows
// nothing.
const insertKeys = 1 << 18

// BenchmarkInsertSteady is AllowKey on a key the limiter has never seen, once it holds insertKeys
// keys in tables sized for them (WithExpectedKeys): every op inserts, at the load a 10M-key
// limiter sized that way runs at. bench/scripts/instructions.sh counts its instructions per insert;
// its ns/op is not the figure for inserts (the tables here fit in a large cache; see the peer
// benchmarks' BenchmarkInsert). Runs of more than 24,000 ops fail.
func BenchmarkInsertSteady(b *testing.B) {
	clk := clock.NewManual(1_764_000_000_000)
	l, err := New(policy.SlidingCounter{Limit: 1<<21 - 1, Window: time.Second}, WithClock(clk),
		WithEviction(false), WithExpectedKeys(insertKeys))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for k := range uint64(insertKeys) {
		l.AllowKey(k, 1)
	}
	insertLoop(b, l)
}

func insertLoop(b *testing.B, l *Limiter) {
	k := uint64(insertKeys)
	for b.Loop() {
		if k++; k > insertKeys+24_000 {
			b.Fatal("more than 24,000 inserts: the tables would grow")
		}
		if !l.AllowKey(k, 1) {
			b.Fatalf("key %d's first request was refused", k)
		}
	}
}
