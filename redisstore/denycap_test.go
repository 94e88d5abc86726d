package redisstore

import (
	"strconv"
	"sync"
	"testing"
)

// TestDenyCacheNeverPassesItsCap: refusals of distinct keys stored from many goroutines at once
// never leave the cache holding more than its cap, at any moment, not only at the end: the check
// of the size and the insert were two steps, and goroutines that passed the check together all
// inserted.
func TestDenyCacheNeverPassesItsCap(t *testing.T) {
	const maxKeys, workers, each = 4, 16, 2000
	for round := range 20 {
		c := newDenyCache(maxKeys)
		var wg sync.WaitGroup
		var mu sync.Mutex
		most := 0
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := 0
				for i := range each {
					key := strconv.Itoa(w) + "/" + strconv.Itoa(i)
					c.put(key, denyEntry{until: 1 << 40}, 1, c.version(key))
					local = max(local, c.m.Size())
					if i%3 == 0 {
						c.gaveBackTo(key)
					}
				}
				mu.Lock()
				most = max(most, local)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if most > maxKeys || c.m.Size() > maxKeys || c.len() != c.m.Size() {
			t.Fatalf("round %d: the cache held up to %d keys (now %d, len %d); its cap is %d", round, most, c.m.Size(), c.len(), maxKeys)
		}
	}
}
