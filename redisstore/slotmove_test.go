package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/policy"
)

// TestClusterSlotMove moves the slot of a busy key from one node of a real two-node cluster to
// the other (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) while 4 goroutines take from it
// through NewClient's cluster client. Every call must be decided by Redis (the client follows
// ASK and MOVED, and the script is loaded on the new node on first use), and the count Redis
// holds afterwards must equal the admissions the callers saw: nothing lost, nothing counted twice.
func TestClusterSlotMove(t *testing.T) {
	nodes := startCluster(t, 2)
	ctx := context.Background()
	c, err := NewClient("redis://" + nodes[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := New(c, "move", policy.FixedWindow{Limit: 1 << 30, Window: time.Hour}, WithTimeout(2*time.Second), WithOnFailure(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	admins := make([]*redis.Client, 2)
	ids := make([]string, 2)
	for i, n := range nodes {
		admins[i] = redis.NewClient(&redis.Options{Addr: n.Addr, DisableIdentity: true})
		defer admins[i].Close()
		if ids[i], err = admins[i].Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
			t.Fatal(err)
		}
	}
	slot, err := admins[0].ClusterKeySlot(ctx, l.Key("moving")).Result()
	if err != nil {
		t.Fatal(err)
	}
	src := int(slot * 2 / 16384) // startCluster gives node i the i-th half of the slots
	dst := 1 - src

	var stop atomic.Bool
	var admitted, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := 0; i < 1_000_000 && !stop.Load(); i++ {
				d, err := l.Take(ctx, "moving", 1)
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case d.Allowed:
					admitted.Add(1)
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	before := admitted.Load()
	host, port, _ := strings.Cut(nodes[dst].Addr, ":")
	steps := [][]any{
		{dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src]},
		{src, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst]},
	}
	for _, s := range steps {
		if err := admins[s[0].(int)].Do(ctx, s[1:]...).Err(); err != nil {
			t.Fatalf("%v: %v", s[1:], err)
		}
	}
	time.Sleep(50 * time.Millisecond) // traffic while the slot is half-moved
	keys, err := admins[src].ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := admins[src].Migrate(ctx, host, port, k, 0, 5*time.Second).Err(); err != nil {
			t.Fatalf("MIGRATE %s: %v", k, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	for _, i := range []int{dst, src} {
		if err := admins[i].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst]).Err(); err != nil {
			t.Fatalf("SETSLOT NODE on node %d: %v", i, err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	v, err := admins[dst].Get(ctx, l.Key("moving")).Result()
	if err != nil {
		t.Fatalf("the key is not on the new node: %v", err)
	}
	_, countStr, _ := strings.Cut(v, " ")
	count, _ := strconv.ParseInt(countStr, 10, 64)
	t.Logf("slot %d moved from node %d to node %d (%d keys) under load: %d admitted (%d before the move), %d failed; Redis counts %d",
		slot, src, dst, len(keys), admitted.Load(), before, failed.Load(), count)
	if f := failed.Load(); f > 0 {
		t.Errorf("%d calls failed during the slot move; first: %v", f, firstErr.Load())
	}
	if count != admitted.Load() {
		t.Errorf("Redis counts %d, the callers saw %d admitted", count, admitted.Load())
	}
	if admitted.Load() <= before {
		t.Errorf("no admission after the move began (%d before, %d in all)", before, admitted.Load())
	}
}
