package engine

import (
	"math"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

// TestAllocsRuntimeKeys: keys that exist only at run time (converted from bytes, built in a stack
// buffer, or concatenated) cost no allocation either, under both hashes. A constant key proves
// nothing here: the compiler places it in read-only memory, so it never escapes however the hash
// is called.
func TestAllocsRuntimeKeys(t *testing.T) {
	for _, seeded := range []bool{false, true} {
		t.Run("seeded="+strconv.FormatBool(seeded), func(t *testing.T) {
			var opts []Option
			if seeded {
				opts = append(opts, WithSeed(7))
			}
			l, _ := newSC(t, 1<<20, time.Second, opts...)
			b := []byte("10.0.0." + strconv.Itoa(len(t.Name())) + ":443")
			l.Allow(string(b))
			d := l.Take(string(b), 1)
			m, err := All(l)
			require.NoError(t, err)
			stack := func() {
				var buf [48]byte
				n := copy(buf[:], b)
				l.Allow(unsafe.String(&buf[0], n))
			}
			for name, f := range map[string]func(){
				"Allow":         func() { l.Allow(string(b)) },
				"AllowN":        func() { l.AllowN(string(b), 1) },
				"Take":          func() { _ = l.Take(string(b), 1) },
				"Peek":          func() { _ = l.Peek(string(b)) },
				"Inspect":       func() { _, _ = l.Inspect(string(b)) },
				"TakeWithLimit": func() { _ = l.TakeWithLimit(string(b), 1, 10) },
				"Refund":        func() { _ = l.Refund(string(b), 1, d) },
				"Multi.Take":    func() { _ = m.Take(string(b), 1) },
				"stack buffer":  stack,
				"absent":        func() { _ = l.Peek(string(b[:3])) },
			} {
				require.Zero(t, testing.AllocsPerRun(1000, f), name)
			}
		})
	}
}

// TestHashWidth: string keys hash to 64 bits on every platform (CI runs this under GOARCH=386
// too), so 300,000 distinct keys are 300,000 tracked keys; with 32-bit hashes about ten pairs of
// them would merge (n^2 / 2^33).
func TestHashWidth(t *testing.T) {
	for _, seeded := range []bool{false, true} {
		t.Run("seeded="+strconv.FormatBool(seeded), func(t *testing.T) {
			opts := []Option{WithEviction(false)}
			if seeded {
				opts = append(opts, WithSeed(1))
			}
			l, _ := newSC(t, 10, time.Second, opts...)
			const n = 300_000
			b := make([]byte, 0, 32)
			for i := range n {
				b = strconv.AppendInt(append(append(b[:0], "10."...), strconv.Itoa(i>>16)+"."...), int64(i>>8&255), 10)
				b = strconv.AppendInt(append(b, '.'), int64(i&255), 10)
				b = strconv.AppendInt(append(b, ':'), int64(1024+i%50000), 10)
				require.True(t, l.Allow(string(b)))
			}
			require.Equal(t, n, l.Len(), "distinct keys merged by their hash")
		})
	}
}

// TestTopOfTimeRange: a manual clock given 2^62 or later reads 2^62-1, the last time a cell can
// store, so every policy still decides there, promptly and sensibly; before the clamp the token
// bucket's stored time set a flag bit and Take never returned.
func TestTopOfTimeRange(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingCounter{Limit: 1<<32 - 1, Window: policy.MaxWindow},
		policy.SlidingCounter{Limit: 10, Window: time.Second},
		policy.SlidingLog{Limit: 3, Window: time.Second},
		policy.FixedWindow{Limit: 1<<32 - 1, Window: time.Second},
		policy.TokenBucket{Rate: 1<<32 - 1, Burst: 1<<32 - 1},
		policy.TokenBucket{Rate: 1, Burst: 1<<32 - 1},
		policy.GCRA{Rate: 1<<32 - 1, Burst: 1<<32 - 1},
		policy.LeakyBucket{Rate: 1, Capacity: 1<<32 - 1},
		policy.DualBucket{RequestsPerMin: 1<<32 - 1, TokensPerMin: 1<<32 - 1},
	} {
		clk := clock.NewManual(1 << 62)
		l, err := New(p, WithClock(clk))
		require.NoError(t, err)
		done := make(chan Decision)
		go func() {
			d := l.Take("k", 1)
			clk.Set(math.MaxInt64)
			l.Take("k", 1)
			done <- d
		}()
		select {
		case d := <-done:
			require.True(t, d.Allowed, "%+v", p)
			require.False(t, d.ResetAt.Before(time.UnixMilli(clock.MaxMs)), "%+v: ResetAt %v", p, d.ResetAt)
		case <-time.After(10 * time.Second):
			t.Fatalf("%+v: Take at 2^62 did not return", p)
		}
		l.Close()
	}
}

// TestRefundBoundedByCounted: a refund gives back no more than its decision counted, for every
// policy that refunds, however many units it asks for; a refused decision and a peek count
// nothing and give nothing back.
func TestRefundBoundedByCounted(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingCounter{Limit: 10, Window: time.Second},
		policy.FixedWindow{Limit: 10, Window: time.Second},
		policy.TokenBucket{Rate: 1000, Burst: 10},
		policy.GCRA{Rate: 1000, Burst: 10},
		policy.LeakyBucket{Rate: 1000, Capacity: 10},
	} {
		l, err := New(p, WithClock(clock.NewManual(start)))
		require.NoError(t, err)
		require.True(t, l.Take("k", 9).Allowed)
		d := l.Take("k", 1)
		require.True(t, d.Allowed)
		require.Equal(t, int64(1), d.Counted)
		require.Equal(t, int64(1), l.Refund("k", 10, d), "%s: the decision counted 1", p.ID())
		refused := l.Take("k", 5)
		require.False(t, refused.Allowed)
		require.Zero(t, refused.Counted)
		require.Zero(t, l.Refund("k", 5, refused))
		peek := l.Peek("k")
		require.Zero(t, peek.Counted)
		require.Zero(t, l.Refund("k", 5, peek))
		require.Zero(t, l.TakeKey(1, 0).Counted, "a query counts nothing")
		l.Close()
	}
}
