package peers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/bench/peers"
	"github.com/stretchr/testify/require"
)

func TestAppendKey(t *testing.T) {
	for _, c := range []struct {
		i    uint32
		want string
	}{
		{0, "10.0.0.0"},
		{0x010203, "10.1.2.3"},
		{peers.MaxKeys - 1, "10.255.255.255"},
	} {
		require.Equal(t, c.want, string(peers.AppendKey(nil, c.i)), "key %d", c.i)
	}
	seen := map[string]bool{}
	for i := range uint32(70000) {
		k := string(peers.AppendKey([]byte("junk"), i))
		require.True(t, strings.HasPrefix(k, "junk10."), k)
		require.False(t, seen[k], "key %d repeats %q", i, k)
		seen[k] = true
	}
}

// Every limiter, given a limit of 5 per minute, admits a key's first 5 requests and refuses the
// 6th, while another key is untouched: the adapters really limit, per key. The floor, which is
// not a limiter, admits everything. The variants (peers.Variants) are limiters too.
func TestLimitersLimitPerKey(t *testing.T) {
	for _, name := range append(peers.Names(), peers.Variants()...) {
		t.Run(name, func(t *testing.T) {
			l, err := peers.New(name, peers.Config{Limit: 5, Window: time.Minute, Keys: 16})
			require.NoError(t, err)
			defer func() { require.NoError(t, l.Close()) }()
			var got []bool
			for range 6 {
				got = append(got, l.Allow("10.0.0.1"))
			}
			want := []bool{true, true, true, true, true, false}
			if name == peers.Floor {
				want[5] = true
			}
			require.Equal(t, want, got)
			require.True(t, l.Allow("10.0.0.2"), "a second key has its own count")
		})
	}
	require.NotContains(t, peers.Names(), peers.SlidelimitExpected, "a variant runs only when named")
}

func TestNewRejectsBadInput(t *testing.T) {
	_, err := peers.New("nope", peers.Config{Limit: 1, Window: time.Second})
	require.ErrorContains(t, err, `"nope"`)
	for _, c := range []struct {
		cfg   peers.Config
		field string
	}{
		{peers.Config{Limit: 0, Window: time.Second}, "Config.Limit = 0"},
		{peers.Config{Limit: 1, Window: time.Microsecond}, "Config.Window = 1µs"},
		{peers.Config{Limit: 1, Window: time.Second, Keys: -1}, "Config.Keys = -1"},
	} {
		_, err := peers.New(peers.Slidelimit, c.cfg)
		require.ErrorContains(t, err, c.field)
	}
}

func TestNamesPutFloorAndSlidelimitFirst(t *testing.T) {
	require.Equal(t, []string{"floor", "slidelimit", "go-limiter", "httprate", "throttled", "ulule", "x-time-rate"}, peers.Names())
}

func TestWorkloads(t *testing.T) {
	hot := peers.HotKey()
	require.Equal(t, 1, hot.Len())
	require.Equal(t, "10.0.0.0", hot.Key(0))
	require.Equal(t, "10.0.0.0", hot.Key(12345))

	u := peers.Uniform("u", 1000, 12)
	require.Equal(t, 4096, u.Len())
	distinct := map[string]bool{}
	for i := range uint64(u.Len()) {
		distinct[u.Key(i)] = true
	}
	// 4096 draws from 1000 keys leave about 1.7% of them undrawn.
	require.Greater(t, len(distinct), 950)
	require.LessOrEqual(t, len(distinct), 1000)
	require.Equal(t, u.Key(5), u.Key(5+uint64(u.Len())), "the sequence repeats")

	z := peers.Zipf("z", 1000, 1.1, 12)
	counts := map[string]int{}
	for i := range uint64(z.Len()) {
		counts[z.Key(i)]++
	}
	top := z.Key(0)
	for k, n := range counts {
		if n > counts[top] {
			top = k
		}
	}
	require.Equal(t, "10.0.0.0", top, "key 0 is the most requested")
	require.Greater(t, counts[top], z.Len()/20, "the top key takes a large share")
}
