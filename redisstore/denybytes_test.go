package redisstore

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestDenyCacheBoundedInBytes: 1,000 refused 256 KiB subjects. The cache keeps each under its
// short name (at most MaxInlineSubject bytes), so it holds them all in a few hundred KiB, not the
// 256 MiB of the subjects themselves, within the bound WithDenyCacheBytes documents.
func TestDenyCacheBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	l := mustNew(t, "big", policy.FixedWindow{Limit: 1, Window: time.Hour}, WithClock(clock.NewManual(1_000_000)))
	const n, size = 1000, 256 << 10
	subject := func(i int) string { return strconv.Itoa(i) + strings.Repeat("x", size) }
	before := heapAlloc()
	for i := range n {
		s := subject(i)
		if d, err := l.Take(ctx, s, 1); err != nil || !d.Allowed {
			t.Fatalf("first take of subject %d: %+v, %v", i, d, err)
		}
		if d, err := l.Take(ctx, s, 1); err != nil || d.Allowed {
			t.Fatalf("second take of subject %d: %+v, %v", i, d, err)
		}
	}
	grew := int64(heapAlloc()) - int64(before)
	st := statsOf(l)
	if st.DenyCacheKeys != n {
		t.Fatalf("deny cache holds %d keys, want %d", st.DenyCacheKeys, n)
	}
	t.Logf("%d refused %d KiB subjects: heap grew %d KiB (%d B per key)", n, size>>10, grew>>10, grew/n)
	if bound := int64(n * DenyCacheEntryBytes); grew > bound {
		t.Fatalf("heap grew %d B for %d refused keys, more than %d B (DenyCacheEntryBytes each)", grew, n, bound)
	}
	// The cache still answers for them.
	if d, _ := l.Take(ctx, subject(7), 1); d.Allowed || statsOf(l).DenyCacheHits == 0 {
		t.Fatalf("a remembered long subject was not answered from the cache: %+v", d)
	}
}

// TestDenyCacheSlidingLog: a blocked client of a small sliding log is answered locally, with the
// Decision Redis gives; above MaxCachedLogLimit every refusal goes to Redis. The cached logs stay
// within DenyCacheEntryBytes each, even with the longest verbatim subjects.
func TestDenyCacheSlidingLog(t *testing.T) {
	ctx := context.Background()
	const start = 1_760_000_000_000
	for _, tc := range []struct {
		limit     int64
		wantTrips int64
	}{{5, 1}, {MaxCachedLogLimit, 1}, {MaxCachedLogLimit + 1, 200}} {
		t.Run(strconv.FormatInt(tc.limit, 10), func(t *testing.T) {
			clk := clock.NewManual(start)
			p := policy.SlidingLog{Limit: tc.limit, Window: time.Second}
			c := newClient(t, testAddr)
			cached, err := New(c, "cached", p, WithClock(clk), WithTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer cached.Close()
			plain, err := New(c, "plain", p, WithClock(clk), WithTimeout(2*time.Second), WithDenyCache(0))
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			for i := range tc.limit {
				clk.Set(start + i*10) // spread over the window, so entries leave one by one
				for _, l := range []*Limiter{cached, plain} {
					if d, err := l.Take(ctx, "abuser", 1); err != nil || !d.Allowed {
						t.Fatalf("take %d: %+v, %v", i, d, err)
					}
				}
			}
			base := statsOf(cached)
			for i := range 200 {
				clk.Set(start + tc.limit*10 + int64(i%500))
				a, errA := cached.Take(ctx, "abuser", 1)
				b, errB := plain.Take(ctx, "abuser", 1)
				if errA != nil || errB != nil {
					t.Fatal(errA, errB)
				}
				if !sameDecision(a, b) {
					t.Fatalf("try %d: deny cache decided %+v, Redis %+v", i, a, b)
				}
			}
			if trips := statsOf(cached).RoundTrips - base.RoundTrips; trips != tc.wantTrips {
				t.Fatalf("limit %d: %d round trips for 200 refusals, want %d", tc.limit, trips, tc.wantTrips)
			}
		})
	}
	// Memory: 300 refused keys with 128-byte subjects and full 32-entry logs.
	l := mustNew(t, "logbytes", policy.SlidingLog{Limit: MaxCachedLogLimit, Window: time.Hour}, WithClock(clock.NewManual(start)))
	subject := func(i int) string { return strings.Repeat("y", MaxInlineSubject-4) + strconv.Itoa(1000+i) }
	const n = 300
	before := heapAlloc()
	for i := range n {
		if _, err := l.Take(ctx, subject(i), MaxCachedLogLimit); err != nil {
			t.Fatal(err)
		}
		if d, err := l.Take(ctx, subject(i), 1); err != nil || d.Allowed {
			t.Fatalf("subject %d: %+v, %v", i, d, err)
		}
	}
	grew := int64(heapAlloc()) - int64(before)
	t.Logf("%d refused sliding logs of %d entries, %d-byte subjects: heap grew %d B per key", n, MaxCachedLogLimit, MaxInlineSubject, grew/n)
	if st := statsOf(l); st.DenyCacheKeys != n || grew > n*DenyCacheEntryBytes {
		t.Fatalf("%d keys cached, heap grew %d B; want %d keys in at most %d B", st.DenyCacheKeys, grew, n, n*DenyCacheEntryBytes)
	}
}
