package batched

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// testCluster is a Redis Cluster of real redis-servers, node i owning the i-th of n equal slot
// ranges, with no replicas.
type testCluster struct {
	addrs  []string
	admins []*redis.Client // one per node, for CLUSTER commands
	ids    []string        // node ids, for SETSLOT
}

func startCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	ctx := context.Background()
	tc := &testCluster{}
	for i := range n {
		srv, err := redistest.Start("--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i))
		if err != nil {
			t.Fatalf("start cluster node: %v", err)
		}
		t.Cleanup(srv.Stop)
		a := newClient(t, srv.Addr)
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
		}
		id, err := a.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("CLUSTER MYID: %v", err)
		}
		tc.addrs, tc.admins, tc.ids = append(tc.addrs, srv.Addr), append(tc.admins, a), append(tc.ids, id)
	}
	for i := 1; i < n; i++ {
		host, port, _ := strings.Cut(tc.addrs[i], ":")
		if err := tc.admins[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("CLUSTER MEET: %v", err)
		}
	}
	for _, a := range tc.admins {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			info, _ := a.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster not ok after 10s: %s", info)
			}
		}
	}
	return tc
}

// owner returns the slot of key and the index of the node that owns it.
func (tc *testCluster) owner(t *testing.T, key string) (slot int64, node int) {
	t.Helper()
	slot, err := tc.admins[0].ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return slot, int(slot * int64(len(tc.addrs)) / 16384)
}

// nameOn returns a limiter name whose control keys (members, epoch, quiet) lie on node.
func (tc *testCluster) nameOn(t *testing.T, node int, w time.Duration) string {
	t.Helper()
	for i := 0; ; i++ {
		name := fmt.Sprintf("f%d", i)
		if _, n := tc.owner(t, membersKey(DefaultPrefix, space(name, w.Milliseconds()))); n == node {
			return name
		}
	}
}

// errLog collects what a WithOnError hook hears; safe for concurrent use.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (e *errLog) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, err)
}

func (e *errLog) all() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.errs...)
}

// While the slot of the fleet's control keys is MIGRATING on its node and IMPORTING on another
// (a reshard under way, or one interrupted and left open), with none of them moved yet, the node
// still runs a script that finds all its keys there. The quiet key used to exist only during a
// quiet, so every heartbeat was answered TRYAGAIN and every process went offline for all its
// keys, on every master, for as long as the slot stayed open.
func TestHeartbeatsWhileTheControlSlotMigrates(t *testing.T) {
	tc := startCluster(t, 2)
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: tc.addrs, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer cc.Close()
	var log errLog
	p := policy.SlidingCounter{Limit: 100, Window: time.Minute}
	l, err := New(cc, "mig", p, withManualExchange(), WithTimeout(5*time.Second), WithOnError(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.offline.Load() {
		t.Fatalf("offline before the migration: %v", log.all())
	}
	slot, src := tc.owner(t, l.members)
	dst := 1 - src
	if err := tc.admins[dst].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", tc.ids[src]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tc.admins[src].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", tc.ids[dst]).Err(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, i := range []int{src, dst} {
			_ = tc.admins[i].Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err()
		}
	}()
	for i := range 5 {
		l.step()
		var s Stats
		if l.Stats(&s); s.Offline || s.Failures != 0 {
			t.Fatalf("heartbeat %d with the control slot open: %+v; the hook heard %v", i+1, s, log.all())
		}
		key := fmt.Sprintf("k%d", i)
		if ks, _ := tc.owner(t, l.Key(key)); ks == slot {
			continue // a key in the open slot itself: not what this test is about
		}
		if d, err := l.Take(ctx, key, 1); err != nil || !d.Allowed {
			t.Fatalf("request %d with the control slot open: %+v, %v", i+1, d, err)
		}
	}
	if errs := log.all(); len(errs) != 0 {
		t.Fatalf("the hook heard %v, want nothing", errs)
	}
}

// A plain client (not a ClusterClient) on a cluster node gets MOVED for every key of the other
// node's slots. It was taken for an outage: the fleet stayed offline, at the fleet size it
// started with, and nothing said why. It is the misconfiguration that redisstore's Limiter
// reports, here too: from the heartbeat, from a lease, in the hook and in the log.
func TestPlainClientOnAClusterNode(t *testing.T) {
	tc := startCluster(t, 2)
	ctx := context.Background()
	p := policy.SlidingCounter{Limit: 100, Window: time.Minute}
	named := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, redisstore.ErrMisconfigured) || !strings.Contains(err.Error(), "the server is a Redis Cluster node but the client is not a cluster client") ||
			!strings.Contains(err.Error(), "MOVED") {
			t.Fatalf("%s: %v; want ErrMisconfigured naming the cluster", what, err)
		}
	}
	t.Run("heartbeat", func(t *testing.T) {
		// The control keys on node 1, the client on node 0: the heartbeat gets MOVED.
		var log errLog
		l, err := New(newClient(t, tc.addrs[0]), tc.nameOn(t, 1, p.Window), p, withManualExchange(), WithTimeout(5*time.Second), WithOnError(log.add))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		errs := log.all()
		if len(errs) != 1 {
			t.Fatalf("the hook heard %v, want the heartbeat's error", errs)
		}
		named(t, "the heartbeat's error", errs[0])
		if !l.offline.Load() {
			t.Fatal("online after a MOVED heartbeat")
		}
		if _, err := l.Take(ctx, "k", 1); !errors.Is(err, ErrOffline) {
			t.Fatalf("Take: %v, want ErrOffline", err)
		}
	})
	t.Run("log", func(t *testing.T) {
		// Without a hook, the log names it, once, though every heartbeat meets it.
		var buf bytes.Buffer
		old := slog.Default()
		slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
		defer slog.SetDefault(old)
		l, err := New(newClient(t, tc.addrs[0]), tc.nameOn(t, 1, p.Window), p, withManualExchange(), WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		l.step()
		out := buf.String()
		if strings.Count(out, "the server is a Redis Cluster node") != 1 || !strings.Contains(out, "misconfigured") {
			t.Fatalf("the log says %q; want the misconfiguration, once", out)
		}
	})
	t.Run("lease", func(t *testing.T) {
		// The control keys on node 0, where the client is, and the key's counts on node 1:
		// the heartbeat is answered, the lease gets MOVED.
		var log errLog
		l, err := New(newClient(t, tc.addrs[0]), tc.nameOn(t, 0, p.Window), p, withManualExchange(), WithTimeout(5*time.Second), WithOnError(log.add))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if l.offline.Load() {
			t.Fatalf("offline with the control keys on the client's node: %v", log.all())
		}
		key := ""
		for i := 0; key == ""; i++ {
			if _, n := tc.owner(t, l.Key(fmt.Sprint("k", i))); n == 1 {
				key = fmt.Sprint("k", i)
			}
		}
		_, err = l.Take(ctx, key, 1)
		if !errors.Is(err, ErrOffline) {
			t.Fatalf("Take: %v, want ErrOffline", err)
		}
		named(t, "Take's error", err)
		if !l.offline.Load() {
			t.Fatal("online after a MOVED lease: every other request would make a round trip for it")
		}
		if errs := log.all(); len(errs) != 1 || !errors.Is(errs[0], redisstore.ErrMisconfigured) {
			t.Fatalf("the hook heard %v, want Take's error", errs)
		}
	})
}

// TestHeartbeatDropsAnOldQuietTTL: a quiet key that an earlier version wrote with a TTL loses it
// at the next heartbeat, so that it cannot expire during a migration of its slot (the script then
// finds only some of its keys, and every heartbeat would get TRYAGAIN).
func TestHeartbeatDropsAnOldQuietTTL(t *testing.T) {
	ctx := context.Background()
	admin := newClient(t, testAddr)
	flushAll(t, admin)
	l := newLimiter(t, newClient(t, testAddr), clock.NewManual(t0), policy.SlidingCounter{Limit: 10, Window: time.Hour})
	if ok := l.heartbeatOnce(); !ok {
		t.Fatal("the first heartbeat failed")
	}
	if err := admin.Set(ctx, l.quietK, "0", time.Hour).Err(); err != nil { // as the old script wrote it
		t.Fatal(err)
	}
	if ok := l.heartbeatOnce(); !ok {
		t.Fatal("the second heartbeat failed")
	}
	if ttl, err := admin.PTTL(ctx, l.quietK).Result(); err != nil || ttl != -1 {
		t.Fatalf("the quiet key's PTTL after a heartbeat = %v, %v; want -1, no TTL", ttl, err)
	}
}

// heartbeatOnce runs one heartbeat at the limiter's clock, as its exchange does.
func (l *Limiter) heartbeatOnce() bool {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	_, ok := l.heartbeat(l.clk.Now())
	return ok
}
