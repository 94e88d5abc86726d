package batched

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

// stateOf reads a key's state on Redis: its window's start and the current and previous windows'
// counts.
func stateOf(t *testing.T, c *redis.Client, rkey string) (win, cur, prev int64) {
	t.Helper()
	v, err := c.Get(context.Background(), rkey).Result()
	if err == redis.Nil {
		return 0, 0, 0
	}
	f := strings.Fields(v)
	if err != nil || len(f) != 3 {
		t.Fatalf("state of %s: %q, %v", rkey, v, err)
	}
	n := make([]int64, 3)
	for i := range f {
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			t.Fatalf("state of %s: %q", rkey, v)
		}
	}
	return n[0], n[1], n[2]
}

// Redis restarts empty; process P holds a lease of the last window that it never used, granted in
// that window while P's clock was still in the one before (Q's clock runs ahead). Q re-declares
// the 30 units it admitted there; P has nothing used to re-declare, and then gave its unused lease
// back to the new server, which had never counted it: Redis counted 28 for the 30 admitted.
func TestRedeclarationKeepsAnUnusedLeaseFromBeingGivenBack(t *testing.T) {
	srv, admin := ownServer(t)
	const W = int64(60_000)
	base := int64(t0) - int64(t0)%W + 10*W
	pc := clock.NewManual(base + 1000)
	qc := clock.NewManual(base + 1010)
	p := policy.SlidingCounter{Limit: 100, Window: time.Minute}
	quiet := WithOnError(func(error) {})
	P := newLimiter(t, newClient(t, srv.Addr), pc, p, WithMaxChunk(2), WithProcessID("P"), quiet)
	Q := newLimiter(t, newClient(t, srv.Addr), qc, p, WithProcessID("Q"), quiet)
	ctx := context.Background()
	take := func(l *Limiter, n int64) bool {
		t.Helper()
		d, err := l.Take(ctx, "k", n)
		if err != nil {
			t.Fatalf("Take(%d): %v", n, err)
		}
		return d.Allowed
	}
	take(P, 1)
	pc.Advance(time.Millisecond)
	qc.Advance(time.Millisecond)
	take(P, 1) // P's lease in W has a unit left
	pc.Set(base + W - 5)
	qc.Set(base + W + 5)
	var admitted int64
	for range 30 {
		if take(Q, 1) {
			admitted++
		}
	}
	// 1 unit held, 2 needed: Redis, in W+1, grants 2 there; the 3 do not fit P's window.
	if take(P, 3) {
		t.Fatal("P's 3 units admitted, so the lease of W+1 is not unused")
	}
	pc.Set(base + 2*W - 100)
	qc.Set(base + 2*W - 90)
	P.step()
	Q.step()
	pc.Set(base + 2*W + 100)
	qc.Set(base + 2*W + 110)
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	Q.step() // finds the loss and re-declares its 30
	P.step() // finds it too
	if win, _, prev := stateOf(t, admin, Q.Key("k")); win != base+2*W || prev != admitted {
		t.Errorf("Redis counts %d units for window W+1 (state at %d, want %d); the fleet admitted %d there", prev, win, base+2*W, admitted)
	}
}

// P's lease runs ahead of its clock (granted in W+1, where Q's clock already is) when Redis
// restarts empty, and P re-declares first: the script, finding no state, started its window at
// P's clock, in W, and dropped the adjustment for W+1, which P then took as declared.
func TestRedeclarationOfALeaseAheadOfTheClock(t *testing.T) {
	srv, admin := ownServer(t)
	const W = int64(60_000)
	base := int64(t0) - int64(t0)%W + 10*W
	pc := clock.NewManual(base + W - 5)
	qc := clock.NewManual(base + W + 5)
	p := policy.SlidingCounter{Limit: 100, Window: time.Minute}
	quiet := WithOnError(func(error) {})
	P := newLimiter(t, newClient(t, srv.Addr), pc, p, WithProcessID("P"), quiet)
	Q := newLimiter(t, newClient(t, srv.Addr), qc, p, WithProcessID("Q"), quiet)
	ctx := context.Background()
	if d, err := Q.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	d, err := P.Take(ctx, "k", 3)
	if err != nil || !d.Allowed || d.ResetAt.UnixMilli() != base+2*W {
		t.Fatalf("P's 3 units: %+v, %v; want them admitted in W+1", d, err)
	}
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	P.step() // finds the loss first and re-declares
	Q.step()
	if win, cur, _ := stateOf(t, admin, Q.Key("k")); win != base+W || cur != 4 {
		t.Errorf("Redis counts %d units in the window at %d; want 4 (P's 3 and Q's 1) in W+1, at %d", cur, win, base+W)
	}
}
