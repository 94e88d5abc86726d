package main

import (
	"testing"

	"github.com/slidelimit/slidelimit/bench/peers"
	"github.com/stretchr/testify/require"
)

// A small measurement in process: every key is tracked, the heap grew, and the figure is the
// heap growth divided by the keys.
func TestMeasureSlidelimit(t *testing.T) {
	r, err := measure(peers.Slidelimit, 20000)
	require.NoError(t, err)
	require.Equal(t, int64(20000), r.Tracked)
	require.Positive(t, r.HeapBytes)
	require.InDelta(t, float64(r.HeapBytes)/20000, r.BytesPerK, 1e-9)
	// A key's slot is 16 bytes; a table never fills every slot.
	require.GreaterOrEqual(t, float64(r.TableBytes)/20000, 16.0)
}

func TestLimitersChoice(t *testing.T) {
	all, err := limiters("all")
	require.NoError(t, err)
	require.NotContains(t, all, peers.Floor, "the floor holds no keys")
	require.Contains(t, all, peers.Slidelimit)
	two, err := limiters("slidelimit,httprate")
	require.NoError(t, err)
	require.Equal(t, []string{"slidelimit", "httprate"}, two)
	_, err = limiters("slidelimit,nope")
	require.ErrorContains(t, err, `"nope"`)
}

func TestKeysLabel(t *testing.T) {
	for n, want := range map[int]string{1_000_000: "1M", 10_000_000: "10M", 200_000: "200k", 1234: "1234"} {
		require.Equal(t, want, keysLabel(n))
	}
}
