package batched

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// clientDialer is go-redis's redial loop: after a failed dial a client's pool retries once a
// second in a goroutine of its own, which outlives Close by up to that second. It belongs to the
// client, not to the limiter.
var clientDialer = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

const (
	faultProcs   = 3
	faultWorkers = 3 // goroutines per process
	faultTimeout = 150 * time.Millisecond
	faultSync    = 50 * time.Millisecond
	faultOutage  = 800 * time.Millisecond
	// A correctness bound, not a speed claim: the clients' own read and write timeouts are 30s, so
	// a call that did not honour the limiter's deadline would take 30s; the slack absorbs the
	// scheduling stalls of a loaded 2-core machine under -race.
	faultSlack = 2500 * time.Millisecond
)

type faultCall struct {
	proc    int
	key     string
	phase   int32 // 0 healthy, 1 outage, 2 recovering
	win     int64 // window start (ms) of the decision
	latency time.Duration
	allowed bool
	limit   int64
	err     error
}

// TestOutage pauses (SIGSTOP) or kills (SIGKILL, then restarts empty) a real redis-server under
// load from three processes (three limiters with their own clients and exchange goroutines in
// this test process) and checks:
//   - every call returns within its deadline plus slack, and decisions go on during the outage;
//   - a decision Redis did not back wraps ErrOffline and redisstore.ErrUnavailable, and was made
//     with the limit divided by the live fleet size (3): per process, key and window, at most
//     that many units were admitted offline;
//   - when Redis returns every process reconciles: for each key, Redis's counts for the current
//     and previous windows hold at least every unit the fleet admitted in them (after SIGKILL
//     the server came back empty, so this holds only if the processes re-declared their counts);
//   - the processes leave decisions made offline behind, and no goroutine is left (goleak).
func TestOutage(t *testing.T) {
	for _, fault := range []string{"SIGSTOP", "SIGKILL"} {
		t.Run(fault, func(t *testing.T) { runOutage(t, fault) })
	}
}

func runOutage(t *testing.T, fault string) {
	leaks := goleak.IgnoreCurrent()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	// The whole test lies in two windows, whose counts Redis still holds at the end, and the
	// boundary between them falls in the middle of the outage: the test starts 700ms before it.
	// 8s: a loaded machine under -race has been seen to take almost 10s over this test.
	p := policy.SlidingCounter{Limit: 3000, Window: 8 * time.Second}
	w := rules.SlidingCounter(p).WindowMs()
	time.Sleep(time.Duration((2*w-boundaryAt-time.Now().UnixMilli()%w)%w) * time.Millisecond)
	share := p.Limit / faultProcs
	ls := make([]*Limiter, faultProcs)
	clients := make([]*redis.Client, faultProcs)
	for i := range ls {
		clients[i] = redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16, DisableIdentity: true, ContextTimeoutEnabled: true,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
		if ls[i], err = New(clients[i], "outage", p, WithTimeout(faultTimeout), WithSyncInterval(faultSync),
			WithProcessID("p"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"a", "b"}
	var phase atomic.Int32
	var stop atomic.Bool
	var mu sync.Mutex
	var calls []faultCall
	var wg sync.WaitGroup
	for pi, l := range ls {
		for g := range faultWorkers {
			wg.Go(func() {
				var local []faultCall
				ctx := context.Background()
				for i := 0; i < 400_000 && !stop.Load(); i++ {
					key := keys[(i+g)%len(keys)]
					ph := phase.Load()
					start := time.Now()
					d, err := l.Take(ctx, key, 1)
					local = append(local, faultCall{proc: pi, key: key, phase: ph, win: d.ResetAt.UnixMilli() - rules.SlidingCounter(p).WindowMs(),
						latency: time.Since(start), allowed: d.Allowed, limit: d.Limit, err: err})
					time.Sleep(50 * time.Microsecond)
				}
				mu.Lock()
				calls = append(calls, local...)
				mu.Unlock()
			})
		}
	}
	stats := func(l *Limiter) Stats {
		var s Stats
		l.Stats(&s)
		return s
	}

	// Each process hears of the whole fleet only at the heartbeats after the others' first: waited
	// for, not assumed within a fixed time, which a loaded machine can pass.
	started := time.Now()
	for i, l := range ls {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			s := stats(l)
			if s.Fleet == faultProcs && !s.Offline {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("process %d before the fault: %+v, want a fleet of %d, online", i, s, faultProcs)
				break
			}
		}
	}
	time.Sleep(300*time.Millisecond - time.Since(started))
	phase.Store(1)
	switch fault {
	case "SIGSTOP":
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
	case "SIGKILL":
		srv.Kill()
	}
	time.Sleep(faultOutage)
	offline := 0
	for _, l := range ls {
		if stats(l).Offline {
			offline++
		}
	}
	phase.Store(2)
	switch fault {
	case "SIGSTOP":
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
	case "SIGKILL":
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	back := time.Now()
	recovered := time.Duration(-1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		all := true
		for _, l := range ls {
			all = all && !stats(l).Offline
		}
		if all {
			recovered = time.Since(back)
			break
		}
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	// Two more exchanges, so that whatever was admitted last is charged.
	time.Sleep(3 * faultSync)

	if offline != faultProcs {
		t.Errorf("%d of %d processes noticed the outage", offline, faultProcs)
	}
	if recovered < 0 {
		for i, l := range ls {
			t.Logf("process %d: %+v", i, stats(l))
			l.entries.Range(func(k string, e *entry) bool {
				e.mu.Lock()
				t.Logf("  %s: cell %x rec %+v", k, e.cell.Load(), e.rec)
				e.mu.Unlock()
				return true
			})
		}
		t.Fatalf("not every process was back online within 10s after the server returned")
	}
	type pkw struct {
		proc int
		key  string
		win  int64
	}
	offAdmitted := map[pkw]int64{}
	admitted := map[string]map[int64]int64{}
	errKinds := map[string]int{}
	defer func() { t.Logf("errors: %v", errKinds) }()
	var outageCalls, offlineCalls, lateOK int
	var worst time.Duration
	for _, c := range calls {
		worst = max(worst, c.latency)
		if c.latency > faultTimeout+faultSlack {
			t.Errorf("a call took %v, more than the %v deadline plus %v", c.latency, faultTimeout, faultSlack)
		}
		if c.phase == 1 {
			outageCalls++
		}
		if c.err != nil {
			errKinds[c.err.Error()]++
			if !errors.Is(c.err, ErrOffline) || !errors.Is(c.err, redisstore.ErrUnavailable) {
				t.Fatalf("error %v wraps neither ErrOffline nor redisstore.ErrUnavailable", c.err)
			}
			offlineCalls++
			// An offline decision reports the policy's limit; the share it applied (the limit
			// divided by the fleet, 3 from the fault on) is checked on what it admitted below.
			if c.phase > 0 && c.limit != p.Limit {
				t.Fatalf("an offline decision had limit %d, want the policy's: %d", c.limit, p.Limit)
			}
			if c.allowed && c.phase > 0 {
				offAdmitted[pkw{c.proc, c.key, c.win}]++
			}
		} else if c.phase == 2 {
			lateOK++
		}
		if c.allowed {
			if admitted[c.key] == nil {
				admitted[c.key] = map[int64]int64{}
			}
			admitted[c.key][c.win]++
		}
	}
	if outageCalls == 0 || offlineCalls == 0 {
		t.Fatalf("%d calls during the outage, %d decided offline: the outage was not seen", outageCalls, offlineCalls)
	}
	for k, n := range offAdmitted {
		if n > share {
			t.Errorf("process %d admitted %d units of key %s offline in window %d: more than its share %d", k.proc, n, k.key, k.win, share)
		}
	}
	if lateOK == 0 {
		t.Errorf("no call after the server returned was decided through Redis")
	}
	requireReconciled(t, srv.Addr, p, admitted, ls[0].Key)
	for i, l := range ls {
		t.Logf("process %d: %+v", i, stats(l))
		l.entries.Range(func(k string, e *entry) bool {
			e.mu.Lock()
			t.Logf("  %s: cell %x rec %+v", k, e.cell.Load(), e.rec)
			e.mu.Unlock()
			return true
		})
		_ = l.Close()
		_ = clients[i].Close()
	}
	t.Logf("%s: %d calls during the %v outage, %d decided offline; back online %v after the server returned; slowest call %v",
		fault, outageCalls, faultOutage, offlineCalls, recovered.Round(time.Millisecond), worst.Round(time.Millisecond))
	srv.Stop()
	goleak.VerifyNone(t, leaks, clientDialer)
}

// boundaryAt is how long after the outage tests start the window boundary falls (ms): 700, in
// the middle of the outage, unless BOUNDARY says otherwise (for probing other placements).
var boundaryAt = func() int64 {
	if v, err := strconv.ParseInt(os.Getenv("BOUNDARY"), 10, 64); err == nil {
		return v
	}
	return 700
}()

// requireReconciled polls Redis, for at most 5 s, until it counts at least what the fleet admitted
// per key and window (admitted[key][window start]), and fails the test if it never does. The
// reconciliation is asynchronous (each process's next exchange, which a loaded machine may
// delay). keyOf names a key's state on Redis; the per-window counts are logged.
func requireReconciled(t *testing.T, addr string, p policy.SlidingCounter, admitted map[string]map[int64]int64, keyOf func(string) string) {
	t.Helper()
	admin := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer admin.Close()
	w := rules.SlidingCounter(p).WindowMs()
	var report []string
	reconciled := false
	for deadline := time.Now().Add(5 * time.Second); !reconciled && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		reconciled, report = true, report[:0]
		for key, wins := range admitted {
			v, err := admin.Get(context.Background(), keyOf(key)).Result()
			if err != nil {
				t.Fatalf("key %s: %v", key, err)
			}
			f := strings.Fields(v)
			win, _ := strconv.ParseInt(f[0], 10, 64)
			cur, _ := strconv.ParseInt(f[1], 10, 64)
			prev, _ := strconv.ParseInt(f[2], 10, 64)
			for wstart, n := range wins {
				var counted int64
				switch wstart {
				case win:
					counted = cur
				case win - w:
					counted = prev
				default:
					t.Fatalf("key %s: admissions in window %d, Redis holds %q", key, wstart, v)
				}
				reconciled = reconciled && counted >= n
				report = append(report, fmt.Sprintf("key %s window %d: fleet admitted %d, Redis counts %d (limit %d)", key, wstart, n, counted, p.Limit))
			}
		}
	}
	for _, r := range report {
		t.Log(r)
	}
	if !reconciled {
		t.Errorf("not reconciled within 5s: Redis counts fewer units than the fleet admitted")
	}
}

// TestEmptyRestartBeforeHeartbeat: Redis restarts empty between two heartbeats (a sync interval
// of a minute keeps the next one out of the test). A lease asked for then must not be granted
// against the emptied counts: the script sees the fleet's epoch token gone, and the process
// decides alone, with an error, until its heartbeat re-declares what it counted.
func TestEmptyRestartBeforeHeartbeat(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	p := policy.SlidingCounter{Limit: 10, Window: time.Hour}
	ctx := context.Background()
	var ls [2]*Limiter
	for i := range ls {
		if ls[i], err = New(newClient(t, srv.Addr), "restart", p, WithSyncInterval(time.Minute), WithTimeout(200*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		defer ls[i].Close()
	}
	for i := range 10 {
		if d, err := ls[0].Take(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("request %d within the limit: %+v, %v", i+1, d, err)
		}
	}
	if d, err := ls[1].Take(ctx, "k", 1); err != nil || d.Allowed {
		t.Fatalf("the 11th unit of a limit of 10: %+v, %v; want refused by Redis", d, err)
	}
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	silent, alone := 0, 0
	for i := range 20 {
		d, err := ls[i%2].Take(ctx, "k", 1)
		switch {
		case err == nil && d.Allowed:
			silent++
		case errors.Is(err, ErrOffline) && d.Allowed:
			alone++
		case err != nil && !errors.Is(err, ErrOffline):
			t.Fatalf("request %d after the restart: %v; want nil or ErrOffline", i+1, err)
		}
	}
	if silent > 0 {
		t.Fatalf("after an empty restart %d units were admitted with no error, on top of the 10 of the limit", silent)
	}
	// Deciding alone, each of the 2 processes admits at most its share, 10/2.
	if alone > 10 {
		t.Fatalf("%d units admitted alone by 2 processes, above their shares of 5", alone)
	}
	t.Logf("after the restart: %d admitted alone (ErrOffline), none silently", alone)
}

// TestBackAtTheFirstHeartbeatAfterALongOutage: a process that was offline for many heartbeats
// reaches Redis again at its first heartbeat after the server is back, and Close then charges what
// it admitted alone. go-redis's pool stops dialing once PoolSize dials have failed, and from then
// on tries once a second: heartbeats that each dialed through the pool put a process there after
// PoolSize sync intervals of an outage, so it stayed offline up to a second after Redis was back
// (the joiner's window in docs/fleet.md, "Outages"), and a Close in that second skipped the charge.
func TestBackAtTheFirstHeartbeatAfterALongOutage(t *testing.T) {
	srv, c := ownServer(t) // a client of PoolSize 16
	clk := clock.NewManual(t0)
	l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 100, Window: time.Hour}, WithTimeout(200*time.Millisecond), WithOnError(func(error) {}))
	ctx := context.Background()
	if d, err := l.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("Take: %+v %v", d, err)
	}
	srv.Kill()
	for range 40 { // more than PoolSize heartbeats, each of which could dial
		clk.Advance(time.Millisecond)
		l.step()
	}
	var s Stats
	if l.Stats(&s); !s.Offline {
		t.Fatalf("not offline after 40 heartbeats with the server killed: %+v", s)
	}
	alone := 0
	for range 5 {
		if d, err := l.Take(ctx, "k", 1); errors.Is(err, ErrOffline) && d.Allowed {
			alone++
		}
	}
	if alone == 0 {
		t.Fatal("nothing admitted alone while offline")
	}
	failures := s.Failures
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Millisecond)
	l.step()
	// Back, and empty: the heartbeat finds the loss, and the process re-declares its counts (then
	// holds to the quiet that follows a loss, deciding alone, so Offline stays true).
	if l.Stats(&s); s.Failures != failures {
		t.Fatalf("the first heartbeat after Redis came back failed: %+v", s)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, n, _ := stateOf(t, c, l.Key("k")); n < int64(1+alone) {
		t.Fatalf("the key's count after Close = %d; want at least the unit leased before the outage and the %d admitted alone", n, alone)
	}
}

// dropPipelines lets skip pipelines through, then fails the next n before they reach the server,
// as a connection refused would.
type dropPipelines struct{ skip, n atomic.Int32 }

func (d *dropPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (d *dropPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *dropPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if d.skip.Add(-1) < 0 && d.n.Add(-1) >= 0 {
			err := errors.New("dial tcp: connection refused (dropped by the test)")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestRedeclarationRetried: after an empty restart, the heartbeat sees the new epoch once; if the
// pipeline that re-declares the process's counts then fails, the next exchange sends it again
// (and only once per key), rather than only the charges made offline. Without that, the emptied
// counts stayed empty and the fleet admitted a whole limit more, with no error.
func TestRedeclarationRetried(t *testing.T) {
	t.Run("every pipeline failed", func(t *testing.T) { redeclareAfterFailure(t, 2, 0) })
	// The first batch of maxBatch keys went through (two pipelines: the restarted server knew no
	// script, so EVALSHA's NOSCRIPT was followed by EVAL), the second batch failed: the retry
	// declares only the keys of the second.
	t.Run("one of two batches failed", func(t *testing.T) { redeclareAfterFailure(t, maxBatch+1, 2) })
}

func redeclareAfterFailure(t *testing.T, keys int, skip int32) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c := newClient(t, srv.Addr)
	drop := &dropPipelines{}
	c.AddHook(drop)
	clk := clock.NewManual(t0)
	l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 10, Window: time.Hour})
	ctx := context.Background()
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint("k", i)
	}
	for _, k := range names {
		for i := range 5 {
			if d, err := l.Take(ctx, k, 1); err != nil || !d.Allowed {
				t.Fatalf("%s: request %d within the limit: %+v, %v", k, i+1, d, err)
			}
		}
	}
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	drop.skip.Store(skip)
	drop.n.Store(1)
	clk.Advance(50 * time.Millisecond)
	l.step() // the heartbeat sees the new epoch; a re-declaring pipeline fails
	clk.Advance(50 * time.Millisecond)
	l.step()
	clk.Advance(30 * time.Second) // past the quiet that follows a data loss
	l.step()
	l.step() // a second successful exchange must not declare the counts again
	// Each key's 5 of 10 were re-declared once: 5 more each, not 10 (lost) nor 0 (declared twice).
	wrong := map[int]int{}
	for _, k := range names {
		admitted := 0
		for range 10 {
			if d, _ := l.Take(ctx, k, 1); d.Allowed {
				admitted++
			}
		}
		if admitted != 5 {
			wrong[admitted]++
		}
	}
	if len(wrong) > 0 {
		t.Fatalf("after the re-declaration, 10 more requests per key: keys by the number admitted, where not 5: %v (of %d keys)", wrong, keys)
	}
	// Stats.Charges counts each window re-declared: one per key (the window before held nothing).
	var s Stats
	if l.Stats(&s); s.Charges != int64(keys) {
		t.Fatalf("Stats.Charges = %d after re-declaring %d keys' windows, want %d", s.Charges, keys, keys)
	}
}

// TestEpochCheckOnAClusterNode: a plain client on a one-node Redis Cluster (which owns every
// slot) looks like one server, so leases first carry the epoch key, which the node refuses with
// CROSSSLOT before running anything; the lease is sent again without it, the check is dropped,
// and every request is decided on Redis, without an error. A wrapper around a client, whose
// routing the limiter cannot see, never sends the epoch.
func TestEpochCheckOnAClusterNode(t *testing.T) {
	srv, err := redistest.Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	admin := newClient(t, srv.Addr)
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if info, _ := admin.ClusterInfo(ctx).Result(); strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the one-node cluster did not become ok")
		}
	}
	type wrapped struct{ *redis.Client }
	for name, c := range map[string]redis.UniversalClient{"plain": newClient(t, srv.Addr), "wrapped": wrapped{newClient(t, srv.Addr)}} {
		t.Run(name, func(t *testing.T) {
			l, err := New(c, "node"+name, policy.SlidingCounter{Limit: 5, Window: time.Hour}, WithSyncInterval(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for i := range 6 {
				d, err := l.Take(ctx, "k", 1)
				if err != nil || d.Allowed != (i < 5) {
					t.Fatalf("request %d: %+v, %v; want decided on Redis, the 6th refused", i+1, d, err)
				}
			}
			if l.epochCheck.Load() {
				t.Fatal("the epoch check is still on behind a cluster node")
			}
		})
	}
}

// TestPermissionErrorsGoOffline: a user who may keep the fleet's membership but not touch the
// keys' state gets NOPERM on every lease. That is an error every key gets, so the process decides
// alone (ErrOffline) and asks Redis again once per sync interval, from the heartbeat, rather than
// making a round trip for every request.
func TestPermissionErrorsGoOffline(t *testing.T) {
	admin := newClient(t, testAddr)
	flushAll(t, admin)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "members-only", "reset", "on", ">pw", "~slb:{t:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(ctx, "ACL", "DELUSER", "members-only")
	c := redis.NewClient(&redis.Options{Addr: testAddr, Username: "members-only", Password: "pw", DisableIdentity: true, ContextTimeoutEnabled: true})
	defer c.Close()
	l := newLimiter(t, c, clock.NewManual(t0), policy.SlidingCounter{Limit: 100, Window: time.Hour})
	l.step()
	offline := 0
	for range 200 {
		if _, err := l.Take(ctx, "k", 1); errors.Is(err, ErrOffline) {
			offline++
		}
	}
	var s Stats
	l.Stats(&s)
	t.Logf("200 requests under NOPERM: %d leases, %d offline", s.Leases, offline)
	if s.Leases > 2 || offline < 199 {
		t.Fatalf("200 requests under NOPERM: %d leases asked of Redis, %d decided offline; want at most 2 and the rest offline (%+v)", s.Leases, offline, s)
	}
}

// TestKeyErrorReplyHidesTheSubject: a lease that Redis refuses with an error reply about its key
// alone (another program wrote the key with another type, or a value that is no state) names the
// key with its subject, the caller's key (an address, an API key), written as "…", in the error
// and in WithOnError's hook, where the reply, or the script's own error, quoted it whole. That
// request is decided alone, as ErrOffline says, but the limiter stays online: other keys, and the
// next request for this one, still ask Redis.
func TestKeyErrorReplyHidesTheSubject(t *testing.T) {
	c := newClient(t, testAddr)
	flushAll(t, c)
	ctx := context.Background()
	var mu sync.Mutex
	var reported []error
	l := newLimiter(t, c, clock.NewManual(t0), policy.SlidingCounter{Limit: 10, Window: time.Second}, WithOnError(func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}))
	for _, tc := range []struct {
		what, subject string
		write         func(key string) error
		reply         string
	}{
		{"a set", "api-key-SECRET123", func(key string) error { return c.SAdd(ctx, key, "x").Err() }, "WRONGTYPE"},
		{"a string that is no state", "203.0.113.7", func(key string) error { return c.Set(ctx, key, "garbage", 0).Err() }, "malformed state"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			key := l.Key(tc.subject)
			if err := tc.write(key); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			reported = nil
			mu.Unlock()
			d, err := l.Take(ctx, tc.subject, 1)
			hidden := strings.TrimSuffix(key, tc.subject) + "…"
			var rerr redis.Error
			if err == nil || !strings.Contains(err.Error(), tc.reply) || !errors.As(err, &rerr) {
				t.Fatalf("Take on %s: %+v %v; want the reply %s, which errors.As finds", tc.what, d, err, tc.reply)
			}
			if strings.Contains(err.Error(), tc.subject) || !strings.Contains(err.Error(), "key "+hidden) {
				t.Fatalf("the error %q names the subject, or not the key as %q", err, hidden)
			}
			mu.Lock()
			got := slices.Clone(reported)
			mu.Unlock()
			if len(got) != 1 || strings.Contains(got[0].Error(), tc.subject) || !strings.Contains(got[0].Error(), "key "+hidden) {
				t.Fatalf("WithOnError got %q; want one error naming the key as %q, without the subject", got, hidden)
			}
			if !errors.Is(err, ErrOffline) || !errors.Is(err, redisstore.ErrUnavailable) || !d.Allowed || d.Limit != 10 {
				t.Fatalf("Take on %s: %+v %v; want a decision made alone, with ErrOffline", tc.what, d, err)
			}
			var s Stats
			if l.Stats(&s); s.Offline {
				t.Fatalf("one key's error reply sent the limiter offline: %+v", s)
			}
			if d, err := l.Take(ctx, "other", 1); err != nil || !d.Allowed {
				t.Fatalf("another key after it: %+v %v; want it decided on Redis", d, err)
			}
			leases := s.Leases
			if _, err := l.Take(ctx, tc.subject, 1); !errors.Is(err, ErrOffline) {
				t.Fatalf("the same key again: %v; want Redis asked, and its reply again", err)
			}
			if l.Stats(&s); s.Leases != leases+2 {
				t.Fatalf("%d leases for the two requests after the error, want 2", s.Leases-leases)
			}
		})
	}
}

// logLines is a log/slog handler's output, safe for the limiter's goroutines to write.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *logLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *logLines) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestGoingOfflineIsLoggedOnceWithItsCause: without a WithOnError hook, a limiter that goes
// offline says so once on log/slog's default logger, naming why (here a wrong password, which
// ErrOffline, all its callers get, does not say), however many requests it then decides alone and
// heartbeats fail; with a hook it logs nothing.
func TestGoingOfflineIsLoggedOnceWithItsCause(t *testing.T) {
	logged := new(logLines)
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logged, nil)))
	defer slog.SetDefault(prev)
	admin := newClient(t, testAddr)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "with-password", "reset", "on", ">the-password", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(ctx, "ACL", "DELUSER", "with-password")
	c := redis.NewClient(&redis.Options{Addr: testAddr, Username: "with-password", Password: "not-the-password", DisableIdentity: true, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	for _, hooked := range []bool{false, true} {
		var opts []Option
		if hooked {
			opts = append(opts, WithOnError(func(error) {}))
		}
		l := newLimiter(t, c, clock.NewManual(t0), policy.SlidingCounter{Limit: 10, Window: time.Second}, opts...)
		for range 20 {
			if _, err := l.Take(ctx, "k", 1); !errors.Is(err, ErrOffline) {
				t.Fatalf("hooked %v: err = %v, want ErrOffline", hooked, err)
			}
		}
		l.step()
		l.step()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	out := logged.String()
	if n := strings.Count(out, "offline, Take returns ErrOffline"); n != 1 {
		t.Fatalf("%d lines say the limiter went offline, want 1 (from the limiter without a hook):\n%s", n, out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "WRONGPASS") {
		t.Fatalf("the line does not name the cause at Warn:\n%s", out)
	}
}

// TestCloseChargesWhenRedisIsBackBeforeAHeartbeat: a limiter that decided alone and closes after
// Redis answers again, but before a heartbeat has found out, still charges what it admitted
// alone, gives back its lease and leaves the fleet. It skipped all three while its flag said
// offline, so that another process was then granted the whole limit again.
func TestCloseChargesWhenRedisIsBackBeforeAHeartbeat(t *testing.T) {
	srv, c := ownServer(t)
	clk := clock.NewManual(t0)
	p := policy.SlidingCounter{Limit: 10, Window: time.Minute}
	a := newLimiter(t, c, clk, p, WithTimeout(200*time.Millisecond), WithProcessID("a"))
	ctx := context.Background()
	if d, err := a.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("a first request, Redis up: %+v %v", d, err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	alone := 0
	for range 4 {
		if d, err := a.Take(ctx, "k", 2); errors.Is(err, ErrOffline) && d.Allowed {
			alone += 2
		}
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	var s Stats
	if a.Stats(&s); !s.Offline || alone == 0 {
		t.Fatalf("after the pause: %+v, %d admitted alone; want offline, some admitted alone", s, alone)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// The lease that timed out when the pause began reached Redis once it resumed, and counts
	// too: counted twice, a request only under-admits.
	v, err := c.Get(ctx, a.Key("k")).Result()
	f := strings.Fields(v)
	if err != nil || len(f) != 3 {
		t.Fatalf("the key's counts after Close = %q %v", v, err)
	}
	if n, _ := strconv.Atoi(f[1]); n < 1+alone || n > 1+alone+2 {
		t.Fatalf("the key's count after Close = %d (%q), want the %d admitted, or 2 more", n, v, 1+alone)
	}
	if n, err := c.ZCard(ctx, DefaultPrefix+"{t:w60000}:members").Result(); err != nil || n != 0 {
		t.Fatalf("members after Close: %d %v, want 0", n, err)
	}
}

// TestOfflineRemainingIncludesTheLeaseRest: a request the lease's rest cannot cover is decided
// alone on the share, and its Remaining counts the rest too, which later requests it covers can
// still take. It reported the share's alone.
func TestOfflineRemainingIncludesTheLeaseRest(t *testing.T) {
	srv, c := ownServer(t)
	clk := clock.NewManual(t0)
	l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 100, Window: time.Minute}, WithMaxChunk(20), WithTimeout(200*time.Millisecond))
	ctx := context.Background()
	for i := range 2 {
		if d, err := l.Take(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v %v", i+1, d, err)
		}
		clk.Advance(time.Millisecond) // the second finds the key hot, and leases 20
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	d, err := l.Take(ctx, "k", 30)
	e, _ := l.entries.Load("k")
	rest := int64(uint32(e.cell.Load()))
	if !errors.Is(err, ErrOffline) || !d.Allowed || rest == 0 {
		t.Fatalf("30 units with the server paused: %+v %v, rest %d; want admitted alone, a rest left", d, err, rest)
	}
	// The share is the whole limit (one process): 100 - 30 on it, and the rest beside.
	if d.Remaining != 70+rest {
		t.Fatalf("Remaining = %d, want the share's 70 and the lease's rest %d", d.Remaining, rest)
	}
	if d, err := l.Take(ctx, "k", rest); err != nil || !d.Allowed {
		t.Fatalf("the rest, %d units, from the lease: %+v %v", rest, d, err)
	}
}

// TestKeyErrorReplyInAnExchangeIsReported: an error reply about one key to the background
// exchange (its give-back, here) reaches WithOnError, as every failed exchange does, with the
// subject hidden; the limiter stays online. Only the pipeline's transport failures were reported.
func TestKeyErrorReplyInAnExchangeIsReported(t *testing.T) {
	c := newClient(t, testAddr)
	flushAll(t, c)
	var mu sync.Mutex
	var reported []error
	clk := clock.NewManual(t0)
	l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 100, Window: time.Second}, WithMaxChunk(20), WithOnError(func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}))
	ctx := context.Background()
	const subject = "api-key-SECRET123"
	for i := range 2 {
		if d, err := l.Take(ctx, subject, 1); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v %v", i+1, d, err)
		}
		clk.Advance(time.Millisecond)
	}
	key := l.Key(subject)
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, key, "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // the window has ended: the exchange gives the lease's rest back
	l.step()
	var s Stats
	l.Stats(&s)
	mu.Lock()
	defer mu.Unlock()
	if s.Failures == 0 || len(reported) == 0 || s.Offline {
		t.Fatalf("after an exchange whose give-back met a hash: %+v, reported %v; want a failure reported, online", s, reported)
	}
	for _, err := range reported {
		if strings.Contains(err.Error(), "SECRET123") || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("reported %q: want WRONGTYPE, with the subject hidden", err)
		}
	}
}

// TestBackgroundTimeoutIsTheLimiters: a heartbeat that gets no reply within WithTimeout is
// reported as the limiter's own timeout, one way, as Take reports it: not as "context deadline
// exceeded" or "i/o timeout", whichever fired first, and not as an error that passes errors.Is
// for context.DeadlineExceeded, which would read as some caller's deadline.
func TestBackgroundTimeoutIsTheLimiters(t *testing.T) {
	srv, c := ownServer(t)
	var mu sync.Mutex
	var reported []error
	clk := clock.NewManual(t0)
	l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 100, Window: time.Second}, WithTimeout(50*time.Millisecond), WithOnError(func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}))
	if d, err := l.Take(context.Background(), "k", 1); err != nil || !d.Allowed {
		t.Fatalf("Take: %+v %v", d, err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	clk.Advance(time.Second)
	l.step()
	mu.Lock()
	defer mu.Unlock()
	if len(reported) == 0 {
		t.Fatal("a heartbeat on a paused server reported nothing")
	}
	const want = "no reply within 50ms, the limiter's timeout (WithTimeout)"
	for _, err := range reported {
		if !strings.Contains(err.Error(), want) || errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redisstore.ErrUnavailable) {
			t.Fatalf("reported %q; want ErrUnavailable saying %q, and not context.DeadlineExceeded", err, want)
		}
	}
}

// ownServer starts a redis-server of the test's own, which it may pause, and a client of it; both
// end with the test.
func ownServer(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv, newClient(t, srv.Addr)
}

// TestOfflineModes: while Redis does not answer, WithOfflineMode(FailClosed) refuses what would be
// decided on the share and FailOpen admits it, both with ErrOffline and counting nothing: once
// Redis answers and the limiter closes, Redis holds only the first request's unit, and a refused
// request has cost nothing. (The default, FailLocal, charges Redis what it admitted alone:
// TestCloseChargesWhenRedisIsBackBeforeAHeartbeat.)
func TestOfflineModes(t *testing.T) {
	for _, mode := range []slidelimit.FailureMode{slidelimit.FailClosed, slidelimit.FailOpen} {
		t.Run(mode.String(), func(t *testing.T) {
			srv, c := ownServer(t)
			clk := clock.NewManual(t0)
			l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 10, Window: time.Minute}, WithTimeout(200*time.Millisecond), WithOfflineMode(mode))
			ctx := context.Background()
			d, err := l.Take(ctx, "k", 1)
			if err != nil || !d.Allowed {
				t.Fatalf("a first request, Redis up: %+v %v", d, err)
			}
			// What the first request's lease still holds is Redis's to spend, in every mode.
			e, _ := l.entries.Load("k")
			if rest := int64(uint32(e.cell.Load())); rest > 0 {
				if d, err := l.Take(ctx, "k", rest); err != nil || !d.Allowed {
					t.Fatalf("the lease's rest, %d: %+v %v", rest, d, err)
				}
			}
			leased := d.Counted + int64(uint32(e.cell.Load()))
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				d, err := l.Take(ctx, "k", 2)
				if !errors.Is(err, ErrOffline) || d.Allowed != (mode == slidelimit.FailOpen) || d.Counted != 0 {
					t.Fatalf("request %d with the server paused: %+v %v; want %v with ErrOffline, nothing counted", i+1, d, err, mode)
				}
				if mode == slidelimit.FailClosed && (d.Reason != slidelimit.ReasonLimited || d.RetryAfter <= 0) {
					t.Fatalf("a refusal: %+v, want ReasonLimited with a wait", d)
				}
			}
			var s Stats
			if l.Stats(&s); s.OfflineDecisions != 4 {
				t.Fatalf("%d decided without Redis, want the 4 (by the mode, on no share)", s.OfflineDecisions)
			}
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			v, err := c.Get(ctx, l.Key("k")).Result()
			f := strings.Fields(v)
			if err != nil || len(f) != 3 {
				t.Fatalf("the key's counts after Close = %q %v", v, err)
			}
			// The lease that timed out when the pause began may reach Redis once it resumes: a
			// grant never used, which Close gives back, or which counts once more at most.
			if n, _ := strconv.ParseInt(f[1], 10, 64); n < 1 || n > leased+10 {
				t.Fatalf("the key's count after Close = %d (%q): want what the lease granted before the pause, %d, nothing of the %v answers", n, v, leased, mode)
			}
		})
	}
}

// TestJoinerHoldsToTheQuietAfterADataLoss: a process that joins after Redis came back without its
// data cannot tell the new epoch from a first one, but a process that knew the old epoch has
// started the quiet in Redis, and the joiner holds to it: it decides alone on its share, with
// ErrOffline, while the others re-declare what they counted, instead of leasing at once against
// the emptied counts. (One that joins before any such process has had a heartbeat cannot know:
// docs/fleet.md.)
func TestJoinerHoldsToTheQuietAfterADataLoss(t *testing.T) {
	srv, c := ownServer(t)
	clk := clock.NewManual(t0)
	p := policy.SlidingCounter{Limit: 100, Window: time.Minute}
	ctx := context.Background()
	a := newLimiter(t, c, clk, p, WithProcessID("a"))
	for i := range 60 {
		if d, err := a.Take(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("a's request %d: %+v %v", i+1, d, err)
		}
	}
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	a.step() // a finds the new epoch: the loss, and the quiet
	var s Stats
	if a.Stats(&s); !s.Offline {
		t.Fatalf("a after the loss: %+v, want the quiet (Offline)", s)
	}
	b := newLimiter(t, c, clk, p, WithProcessID("b"))
	for i := range 10 {
		d, err := b.Take(ctx, "k", 1)
		if !errors.Is(err, ErrOffline) {
			t.Fatalf("b's request %d in the quiet: %+v %v; want a decision alone, with ErrOffline", i+1, d, err)
		}
	}
	if b.Stats(&s); !s.Offline || s.OfflineDecisions != 10 {
		t.Fatalf("b in the quiet: %+v, want Offline and 10 decisions alone", s)
	}
}

// TestOfflineErrorsSayWhatTheModeDid: the error an offline decision comes with is ErrOffline to
// errors.Is in every mode, and only FailLocal's says it decided locally.
func TestOfflineErrorsSayWhatTheModeDid(t *testing.T) {
	for mode, want := range map[slidelimit.FailureMode]string{
		slidelimit.FailLocal:  "deciding locally with the limit divided by the fleet size",
		slidelimit.FailClosed: "batched: offline: refused, counting nothing",
		slidelimit.FailOpen:   "batched: offline: admitted, counting nothing",
	} {
		c := newClient(t, "127.0.0.1:1") // nothing listens there
		l := newLimiter(t, c, clock.NewManual(t0), policy.SlidingCounter{Limit: 10, Window: time.Minute}, WithTimeout(20*time.Millisecond), WithOfflineMode(mode))
		_, err := l.Take(context.Background(), "k", 1)
		if !errors.Is(err, ErrOffline) || !errors.Is(err, redisstore.ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v; want ErrOffline saying %q", mode, err, want)
		}
	}
}

// TestMembersWithDifferentSyncIntervals: a live member whose sync interval is longer than
// another's stays in the fleet that other counts (each member is judged by its own liveness), so
// while Redis is away their shares add up to the limit, not more: a default member dropped a
// member of 2 s from its count, took the whole limit as its share, and the two admitted 1.5 times
// the limit in one window.
func TestMembersWithDifferentSyncIntervals(t *testing.T) {
	srv, c := ownServer(t)
	clk := clock.NewManual(t0)
	p := policy.SlidingCounter{Limit: 1000, Window: time.Minute}
	// A second for each call: enough for a loaded machine, and short enough that the default
	// member's liveness (3s) ends before the slow member's next heartbeat, as the defect needs.
	fast := newLimiter(t, c, clk, p, WithTimeout(time.Second))
	slowSync := fast.liveness() + time.Second
	slow := newLimiter(t, newClient(t, srv.Addr), clk, p, WithTimeout(time.Second), WithSyncInterval(slowSync))
	every := slowSync.Milliseconds()
	var sf, ss Stats
	for ms := int64(50); ms <= 5*every; ms += 50 { // fast exchanges every 50 ms, slow every slowSync
		clk.Set(t0 + ms)
		fast.step()
		if ms%every == 0 {
			slow.step()
		}
		if ms > every { // once slow has had its first heartbeat
			if fast.Stats(&sf); sf.Fleet != 2 {
				t.Fatalf("at %d ms the default member counts a fleet of %d, want 2", ms, sf.Fleet)
			}
		}
	}
	if slow.Stats(&ss); ss.Fleet != 2 {
		t.Fatalf("the slow member counts a fleet of %d, want 2", ss.Fleet)
	}
	srv.Kill()
	admitted := 0
	for _, l := range []*Limiter{fast, slow} {
		for range 2000 {
			if d, _ := l.Take(context.Background(), "k", 1); d.Allowed {
				admitted++
			}
		}
	}
	if admitted > int(p.Limit) {
		t.Fatalf("with Redis away the two admitted %d units of one key in one window, above the limit of %d", admitted, p.Limit)
	}
}

// TestDataLossFoundByTheHeartbeatIsSaid: a loss of Redis's data that the heartbeat finds first
// starts a quiet in which requests get ErrOffline; it is said once, to the hook (an error wrapping
// ErrUnavailable that names the loss) or, without one, in the log, as going offline is. It was
// silent, and a loss a lease met first was logged as "Redis does not answer".
func TestDataLossFoundByTheHeartbeatIsSaid(t *testing.T) {
	for _, hook := range []bool{true, false} {
		c := newClient(t, testAddr)
		flushAll(t, c)
		var buf bytes.Buffer
		old := slog.Default()
		slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
		var errs []error
		var opts []Option
		if hook {
			opts = append(opts, WithOnError(func(err error) { errs = append(errs, err) }))
		}
		clk := clock.NewManual(t0)
		l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 10, Window: time.Minute}, opts...)
		if d, err := l.Take(context.Background(), "k", 1); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		flushAll(t, c)
		clk.Advance(50 * time.Millisecond)
		l.step() // the heartbeat finds the loss
		_, err := l.Take(context.Background(), "other", 1)
		slog.SetDefault(old)
		if !errors.Is(err, ErrOffline) {
			t.Fatalf("hook %v: a request in the quiet: %v, want ErrOffline", hook, err)
		}
		if hook {
			if len(errs) != 1 || !errors.Is(errs[0], redisstore.ErrUnavailable) || !strings.Contains(errs[0].Error(), "lost the fleet's counts") {
				t.Fatalf("the hook heard %v, want one error naming the loss", errs)
			}
		} else if !strings.Contains(buf.String(), "Redis lost its data") || strings.Contains(buf.String(), "does not answer") {
			t.Fatalf("the log says %q, want the loss named once", buf.String())
		}
	}
}

// After a data loss the quiet lasts until the longest liveness the finder saw ends: a member with
// a longer sync interval re-declares only at its next heartbeat, and a finder whose quiet was its
// own, shorter liveness leased again against the emptied counts (20 admitted for a limit of 10).
func TestQuietAfterALossOutlastsTheSlowestMember(t *testing.T) {
	srv, c := ownServer(t)
	clk := clock.NewManual(t0)
	p := policy.SlidingCounter{Limit: 10, Window: time.Hour}
	ctx := context.Background()
	// As in TestMembersWithDifferentSyncIntervals: the fast member's own liveness (3s) ends well
	// before the slow member's next heartbeat, which is when the slow one re-declares.
	fast := newLimiter(t, c, clk, p, WithTimeout(time.Second), WithProcessID("fast"))
	live := fast.liveness().Milliseconds()
	slowSync := fast.liveness() + time.Second
	slow := newLimiter(t, newClient(t, srv.Addr), clk, p, WithTimeout(time.Second), WithSyncInterval(slowSync), WithProcessID("slow"))
	fast.step()
	for i := range 10 {
		if d, err := slow.Take(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("slow %d: %+v %v", i, d, err)
		}
	}
	if d, err := fast.Take(ctx, "k", 1); err != nil || d.Allowed {
		t.Fatalf("limit used up, fast: %+v %v", d, err)
	}
	flushAll(t, c) // the data loss
	silent := 0
	for ms := int64(100); ms < slowSync.Milliseconds(); ms += 50 {
		clk.Set(t0 + ms)
		fast.step()
		if ms >= 100+live+200 { // past the end of a quiet of fast's own liveness from the loss found at 100 ms
			if d, err := fast.Take(ctx, "k", 1); err == nil && d.Allowed {
				silent++
			}
		}
	}
	var s Stats
	fast.Stats(&s)
	t.Logf("fast after its own liveness, before slow's heartbeat: %d admitted by Redis with no error; fleet %d", silent, s.Fleet)
	clk.Set(t0 + slowSync.Milliseconds())
	slow.step()
	fast.step()
	t.Logf("Redis key after slow re-declared: %q", c.Get(ctx, fast.Key("k")).Val())
	if silent > 0 {
		t.Errorf("a limit of 10 used up before the loss, then %d more admitted without error", silent)
	}
}

// Redis restarted empty after a heartbeat found it down: the loss the next heartbeat finds is
// logged, though the limiter is still offline then (it was not).
func TestLossFoundAfterAnOutageIsLogged(t *testing.T) {
	srv, c := ownServer(t)
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	clk := clock.NewManual(t0)
	l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 10, Window: time.Minute}, WithTimeout(200*time.Millisecond))
	if d, err := l.Take(context.Background(), "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	srv.Kill()
	clk.Advance(50 * time.Millisecond)
	l.step() // heartbeat fails: offline
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(50 * time.Millisecond)
	l.step() // heartbeat answers with a new epoch: the loss, and a quiet
	var s Stats
	l.Stats(&s)
	_, err := l.Take(context.Background(), "other", 1)
	t.Logf("after the answered heartbeat: Offline=%v, Take err=%v (ErrOffline: %v)", s.Offline, err, errors.Is(err, ErrOffline))
	t.Logf("log:\n%s", buf.String())
	if !bytes.Contains(buf.Bytes(), []byte("lost its data")) {
		t.Errorf("the loss the heartbeat found was not logged")
	}
}

// A loss a lease meets first is logged once, in the words of the loss, and the heartbeat that then
// finds the new epoch adds nothing.
func TestLossMetByALeaseIsLoggedOnce(t *testing.T) {
	c := newClient(t, testAddr)
	flushAll(t, c)
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	clk := clock.NewManual(t0)
	l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 10, Window: time.Minute})
	if d, err := l.Take(context.Background(), "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	flushAll(t, c)
	_, err := l.Take(context.Background(), "cold", 1)
	t.Logf("lease after loss: %v", err)
	for range 30 {
		clk.Advance(50 * time.Millisecond)
		l.step()
	}
	t.Logf("log:\n%s", buf.String())
	if n := bytes.Count(buf.Bytes(), []byte("level=WARN")); n != 1 || !bytes.Contains(buf.Bytes(), []byte("lost its data")) {
		t.Errorf("%d warnings, want one naming the loss:\n%s", n, buf.String())
	}
}
