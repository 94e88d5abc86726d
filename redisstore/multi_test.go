package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// try decides a request on a copy of key's state, and returns the commit that stores the copy.
func (m *stepModel[S]) try(key int, now, cost int64) (engine.Decision, func()) {
	if m.beforeLook != nil && !m.beforeLook(cost) {
		return engine.Decision{Limit: m.limit, Reason: engine.ReasonCostAboveLimit}, func() {}
	}
	before, ok := m.st[key]
	if !ok {
		f := m.fresh(now)
		before = &f
	}
	after := *before
	if m.clone != nil {
		after = m.clone(after)
	}
	r := m.step(&after, now, cost)
	return dec(r, cost), func() {
		if r.Allowed && (cost > 0 || m.spendsZero) {
			m.st[key] = &after
		}
	}
}

type tryModel interface {
	try(key int, now, cost int64) (engine.Decision, func())
}

// TestAllIsAllOrNothing runs random requests through All over several limiters and through a
// model that decides each limiter on a copy of its state and commits the copies only when all
// admit; decisions and states must agree at every step.
func TestAllIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	const start = 1_760_000_000_123
	for ci, ps := range [][]policy.Policy{
		{policy.SlidingCounter{Limit: 3, Window: time.Second}, policy.FixedWindow{Limit: 10, Window: 10 * time.Second}},
		{policy.TokenBucket{Rate: 1, Burst: 5}, policy.GCRA{Rate: 2, Burst: 3}, policy.SlidingLog{Limit: 4, Window: 2 * time.Second}},
		{policy.LeakyBucket{Rate: 10, Capacity: 5}, policy.DualBucket{RequestsPerMin: 5, TokensPerMin: 100}},
		{
			policy.SlidingCounter{Limit: 20, Window: time.Second}, policy.SlidingLog{Limit: 9, Window: 700 * time.Millisecond},
			policy.FixedWindow{Limit: 15, Window: 3 * time.Second}, policy.TokenBucket{Rate: 7, Burst: 8},
			policy.GCRA{Rate: 9, Burst: 6}, policy.LeakyBucket{Rate: 5, Capacity: 12}, policy.DualBucket{RequestsPerMin: 40, TokensPerMin: 30},
		},
	} {
		t.Run(fmt.Sprint(ci), func(t *testing.T) {
			clk := clock.NewManual(start)
			client := newClient(t, testAddr)
			var ls []*Limiter
			var models []tryModel
			for i, p := range ps {
				l, err := New(client, fmt.Sprint("l", i), p, WithClock(clk), WithTimeout(2*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				ls = append(ls, l)
				models = append(models, newRef(t, p).(tryModel))
			}
			m, err := All(ls...)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(ci), 61))
			refused, admitted := 0, 0
			for i, s := range randomSteps(r, ps[0], start, 300, false) {
				clk.Set(s.now)
				cost := min(s.cost, 12)
				var want engine.Decision
				var commits []func()
				// A cost above the smallest limit is asked of that limiter alone (the first of
				// them): no wait admits it, whatever the others hold.
				least := 0
				for j, l := range ls {
					if l.algo.limit < ls[least].algo.limit {
						least = j
					}
				}
				for j, mod := range models {
					if cost > ls[least].algo.limit && j != least {
						continue
					}
					d, commit := mod.try(s.key, s.now, cost)
					if !d.Allowed {
						want, commits = d, nil
						break
					}
					commits = append(commits, commit)
					if j == 0 || d.Remaining < want.Remaining {
						want = d
					}
				}
				for _, c := range commits {
					c()
				}
				got, err := m.Take(ctx, fmt.Sprint("k", s.key), cost)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if !sameDecision(got, want) {
					t.Fatalf("step %d (k%d, now %d, cost %d):\n all   %+v\n model %+v", i, s.key, s.now, cost, got, want)
				}
				if got.Allowed {
					admitted++
				} else {
					refused++
				}
			}
			if refused == 0 || admitted == 0 {
				t.Fatalf("%d admitted, %d refused: the sequence did not exercise both", admitted, refused)
			}
		})
	}
}

func TestAllRejectsBadInput(t *testing.T) {
	p := policy.SlidingCounter{Limit: 3, Window: time.Second}
	a := mustNew(t, "a", p)
	b := mustNew(t, "b", p) // another client
	clk := mustNew(t, "c", p, WithClock(clock.NewManual(1)))
	for _, tc := range []struct {
		ls   []*Limiter
		want string
	}{
		{nil, "0 limiters"},
		{[]*Limiter{a, nil}, "limiter 1 is nil"},
		{[]*Limiter{a, b}, "another client"},
		{[]*Limiter{a, a}, "the same limit"},
	} {
		if _, err := All(tc.ls...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("All(%d limiters): %v, want an error naming %q", len(tc.ls), err, tc.want)
		}
	}
	c2, err := New(clk.client, "c2", p)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := All(clk, c2); err == nil || !strings.Contains(err.Error(), "keeps time another way") {
		t.Errorf("All over client and server time: %v", err)
	}
}

// TestAllOnCluster: every limiter's key for a subject is on one slot, so the several-limits
// script runs on a cluster without CROSSSLOT, for subjects on both nodes.
func TestAllOnCluster(t *testing.T) {
	nodes := startCluster(t, 2)
	c, err := NewClient("redis://" + nodes[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("NewClient gave %T", c)
	}
	clk := clock.NewManual(1_000_000)
	var ls []*Limiter
	for i, p := range []policy.Policy{policy.SlidingCounter{Limit: 2, Window: time.Minute}, policy.GCRA{Rate: 1, Burst: 3}} {
		l, err := New(c, fmt.Sprint("c", i), p, WithClock(clk), WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	m, err := All(ls...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for k := range 20 {
		key := fmt.Sprint("user", k)
		for i := range 3 {
			d, err := m.Take(ctx, key, 1)
			if err != nil {
				t.Fatalf("%s take %d on a cluster: %v", key, i, err)
			}
			if d.Allowed != (i < 2) {
				t.Fatalf("%s take %d: %+v", key, i, d)
			}
		}
	}
}

// TestAllDoneCtxComesFirst: as for Take, a ctx done on entry is returned as ctx's error even
// where the first limiter's deny cache knows the key or its breaker is open.
func TestAllDoneCtxComesFirst(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	isCallers := func(what string, d engine.Decision, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: %+v, err = %v, want context.Canceled and not ErrUnavailable", what, d, err)
		}
	}
	p := policy.SlidingCounter{Limit: 1, Window: time.Minute}

	client := newClient(t, testAddr)
	a, err := New(client, "a", p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(client, "b", policy.FixedWindow{Limit: 5, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := All(a, b)
	if err != nil {
		t.Fatal(err)
	}
	must(m.Take(ctx, "k", 1))
	if d := must(m.Take(ctx, "k", 1)); d.Allowed || statsOf(a).DenyCacheKeys != 1 {
		t.Fatalf("second unit: %+v, deny cache %d keys; want refused and remembered", d, statsOf(a).DenyCacheKeys)
	}
	d, err := m.Take(cancelled, "k", 1)
	isCallers("deny cache hit", d, err)

	dead := deadClient(t)
	oa, err := New(dead, "oa", p, WithBreaker(1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer oa.Close()
	ob, err := New(dead, "ob", p)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	om, err := All(oa, ob)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := om.Take(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dead server: err = %v", err)
	}
	if !statsOf(oa).BreakerOpen {
		t.Fatal("the breaker did not open")
	}
	d, err = om.Take(cancelled, "k", 1)
	isCallers("breaker open", d, err)
}

// TestAllFailureRefusesCostAboveSmallestLimit: when Redis does not decide, FailOpen and
// FailClosed refuse a cost above any limiter's limit, not only the first's, with that limit.
func TestAllFailureRefusesCostAboveSmallestLimit(t *testing.T) {
	c := deadClient(t)
	for _, mode := range []OnFailure{FailOpen, FailClosed} {
		first, err := New(c, "wide", policy.SlidingCounter{Limit: 10, Window: time.Second}, WithOnFailure(mode))
		if err != nil {
			t.Fatal(err)
		}
		second, err := New(c, "narrow", policy.TokenBucket{Rate: 3, Burst: 3})
		if err != nil {
			t.Fatal(err)
		}
		m, err := All(first, second)
		if err != nil {
			t.Fatal(err)
		}
		d, err := m.Take(context.Background(), "k", 5)
		if !errors.Is(err, ErrUnavailable) || d.Allowed || d.Reason != slidelimit.ReasonCostAboveLimit || d.Limit != 3 {
			t.Fatalf("%v: Take(5) with limits 10 and 3 = %+v %v, want ReasonCostAboveLimit, Limit 3, with ErrUnavailable", mode, d, err)
		}
		if d, _ := m.Take(context.Background(), "k", 3); d.Allowed != (mode == FailOpen) {
			t.Fatalf("%v: Take(3) = %+v", mode, d)
		}
		_ = first.Close()
		_ = second.Close()
	}
}

// TestAllCostNoWaitAdmits: a cost above the smallest limit is refused for its cost, with no
// RetryAfter, also when an earlier limiter is used up and would refuse with a wait, in either
// order, as the engine's Multi refuses it; nothing is counted.
func TestAllCostNoWaitAdmits(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(1_760_000_000_000)
	client := newClient(t, testAddr)
	mk := func(name string, limit int64) *Limiter {
		l, err := New(client, name, policy.SlidingCounter{Limit: limit, Window: 10 * time.Second}, WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b := mk("a", 5), mk("b", 2)
	if d, err := a.Take(ctx, "k", 5); err != nil || !d.Allowed {
		t.Fatalf("a.Take(5) = %+v, %v", d, err)
	}
	for _, order := range [][]*Limiter{{a, b}, {b, a}} {
		m, err := All(order...)
		if err != nil {
			t.Fatal(err)
		}
		d, err := m.Take(ctx, "k", 3)
		if err != nil || d.Allowed || d.Reason != slidelimit.ReasonCostAboveLimit || d.Limit != 2 || d.RetryAfter != 0 || d.Remaining != 2 {
			t.Fatalf("%s first: Take(3) = %+v, %v; want b's refusal for the cost: Limit 2, Remaining 2, no RetryAfter", order[0].name, d, err)
		}
	}
	if d, _ := b.Take(ctx, "k", 0); d.Remaining != 2 {
		t.Fatalf("b counted something: Remaining %d", d.Remaining)
	}
}

// TestAllGCRAFirstCostAboveTheSmallestLimit: a GCRA listed first refuses a cost above its burst
// before reading the key, but the smallest limit is the one that answers a cost above it, as in
// the engine's Multi, also when that GCRA's burst is larger.
func TestAllGCRAFirstCostAboveTheSmallestLimit(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(1_760_000_000_000)
	client := newClient(t, testAddr)
	g, err := New(client, "g", policy.GCRA{Rate: 10, Burst: 6}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	b, err := New(client, "b", policy.TokenBucket{Rate: 10, Burst: 4}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := All(g, b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Take(ctx, "k", 8)
	if err != nil || d.Reason != slidelimit.ReasonCostAboveLimit || d.Limit != 4 || d.Remaining != 4 {
		t.Fatalf("Take(8) = %+v, %v; want the bucket of burst 4 to refuse it for its cost, with its 4 left", d, err)
	}
}

// TestZeroAndNilMultiRefuseAsClosed: a Multi not made by All limits nothing, so it refuses with
// ReasonClosed and ErrClosed, as the engine's does, instead of panicking; a Multi with a closed
// limiter refuses the same way, with that limiter's limit, whatever the cost.
func TestZeroAndNilMultiRefuseAsClosed(t *testing.T) {
	ctx := context.Background()
	for name, m := range map[string]*Multi{"zero": {}, "nil": nil} {
		var l slidelimit.Limiter = m
		d, err := l.Take(ctx, "k", 1)
		if !errors.Is(err, ErrClosed) || d != (engine.Decision{Reason: engine.ReasonClosed}) {
			t.Errorf("%s Multi: Take = %+v, %v; want a ReasonClosed refusal with ErrClosed", name, d, err)
		}
	}

	client := newClient(t, testAddr)
	open, err := New(client, "multi-open", policy.SlidingCounter{Limit: 5, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	closed, err := New(client, "multi-closed", policy.FixedWindow{Limit: 10, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m, err := All(open, closed)
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	for _, n := range []int64{-1, 0, 1, 6, 11} {
		d, err := m.Take(ctx, "k", n)
		if !errors.Is(err, ErrClosed) || d != (engine.Decision{Limit: 10, Reason: engine.ReasonClosed}) {
			t.Errorf("Take(%d) with a closed limiter = %+v, %v; want ReasonClosed, Limit 10, ErrClosed", n, d, err)
		}
	}
}
