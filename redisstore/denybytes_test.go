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
