package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// TestRefundEqualsEngine interleaves random takes with refunds of earlier admitted decisions, on
// the engine and on Redis, and requires the same units given back and the same decisions after.
func TestRefundEqualsEngine(t *testing.T) {
	ctx := context.Background()
	refunded := 0
	for ci, c := range policyCases() {
		t.Run(caseName(c.p, c.start), func(t *testing.T) {
			clk := clock.NewManual(c.start)
			eng, err := engine.New(c.p, engine.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			l := mustNew(t, "refund", c.p, WithClock(clk))
			r := rand.New(rand.NewPCG(uint64(ci), 53))
			type taken struct {
				d    engine.Decision
				cost int64
			}
			last := map[string]taken{}
			for i, s := range randomSteps(r, c.p, c.start, 250, false) {
				clk.Set(s.now)
				key := fmt.Sprint("k", s.key)
				if tk, ok := last[key]; ok && r.IntN(3) == 0 {
					n := 1 + r.Int64N(tk.cost+1)
					want := eng.Refund(key, n, tk.d)
					got, err := l.Refund(ctx, key, n, tk.d)
					if err != nil {
						t.Fatalf("step %d: Refund: %v", i, err)
					}
					if got != want {
						t.Fatalf("step %d (%s, now %d): refund %d of %+v: redis gave back %d, engine %d", i, key, s.now, n, tk.d, got, want)
					}
					refunded += int(got)
					delete(last, key)
				}
				want := eng.Take(key, s.cost)
				got, err := l.Take(ctx, key, s.cost)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if !sameDecision(got, want) || got.Counted != want.Counted {
					t.Fatalf("step %d (%s, now %d, cost %d):\n redis  %+v\n engine %+v", i, key, s.now, s.cost, got, want)
				}
				if got.Allowed && s.cost > 0 {
					last[key] = taken{got, s.cost}
				}
			}
		})
	}
	if refunded == 0 {
		t.Fatal("no unit was given back in any case: the test checked nothing")
	}
	t.Logf("%d units given back in all", refunded)
}

// A Redis decision records what it counted, as the engine's does, and Refund gives back no more
// than that, whatever n it is asked for; a decision made by the failure mode counted nothing.
func TestRefundBoundedByCounted(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(1_700_000_000_000)
	p := policy.SlidingCounter{Limit: 10, Window: time.Minute}
	l := mustNew(t, "counted", p, WithClock(clk))
	d, err := l.Take(ctx, "k", 1)
	if err != nil || !d.Allowed || d.Counted != 1 {
		t.Fatalf("Take: %+v, %v; want admitted with Counted 1", d, err)
	}
	if got, err := l.Refund(ctx, "k", 10, d); err != nil || got != 1 {
		t.Fatalf("Refund(10) of a 1-unit decision gave back %d, %v; want 1", got, err)
	}
	if d, _ := l.Take(ctx, "k", 0); d.Remaining != 10 {
		t.Fatalf("after the refund: remaining %d, want 10", d.Remaining)
	}
	failOpen := engine.Decision{Allowed: true, Limit: 10, Reason: engine.ReasonOK}
	if got, err := l.Refund(ctx, "k", 1, failOpen); err != nil || got != 0 {
		t.Fatalf("Refund of a decision that counted nothing gave back %d, %v; want 0", got, err)
	}
}

// holdReply lets the next command armed for it run on the server, then holds its reply until
// released: a Take decided on Redis before a refund whose reply comes back after it.
type holdReply struct {
	armed        atomic.Bool
	ran, release chan struct{}
}

func (h *holdReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.armed.CompareAndSwap(true, false) {
			close(h.ran)
			<-h.release
		}
		return err
	}
}

// TestRefusalBeforeRefundNotRemembered: a refusal Redis decided before a refund of the same key,
// whose reply arrives after the refund, is not remembered by the deny cache; it used to be, and
// the key was then refused with no round trip, for the refusal's whole wait, while Redis had room.
// Reset is the same case.
func TestRefusalBeforeRefundNotRemembered(t *testing.T) {
	for _, giveBack := range []string{"refund", "reset"} {
		t.Run(giveBack, func(t *testing.T) {
			c := newClient(t, testAddr)
			hold := &holdReply{ran: make(chan struct{}), release: make(chan struct{})}
			c.AddHook(hold)
			l, err := New(c, "race-"+giveBack, policy.SlidingCounter{Limit: 1, Window: time.Hour}, WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			first, err := l.Take(ctx, "k", 1)
			if err != nil || !first.Allowed {
				t.Fatalf("first take: %+v, %v", first, err)
			}
			hold.armed.Store(true)
			refused := make(chan engine.Decision, 1)
			go func() {
				d, _ := l.Take(ctx, "k", 1)
				refused <- d
			}()
			<-hold.ran // refused on Redis; its reply is held
			if giveBack == "refund" {
				if g, err := l.Refund(ctx, "k", 1, first); err != nil || g != 1 {
					t.Fatalf("refund: %d, %v", g, err)
				}
			} else if err := l.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			close(hold.release)
			if d := <-refused; d.Allowed {
				t.Fatalf("the take decided before the %s was admitted: %+v", giveBack, d)
			}
			before := statsOf(l).RoundTrips
			if d, err := l.Take(ctx, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("after the %s Redis has room, but the take was refused: %+v, %v (round trips %d, was %d)",
					giveBack, d, err, statsOf(l).RoundTrips, before)
			}
		})
	}
}

// TestRefundOfAnotherKeyKeepsRefusals: a refund of another key, applied while a refusal's call was
// out, does not keep that refusal out of the deny cache; with one count for every key, the refunds
// rls makes all the time sent most refused keys back to Redis on each request.
func TestRefundOfAnotherKeyKeepsRefusals(t *testing.T) {
	other := "other"
	for i := 0; stripeOf(other) == stripeOf("k"); i++ {
		other = fmt.Sprint("other", i)
	}
	c := newClient(t, testAddr)
	hold := &holdReply{ran: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(hold)
	l, err := New(c, "race-other", policy.SlidingCounter{Limit: 1, Window: time.Hour}, WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if d, err := l.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v, %v", d, err)
	}
	o, err := l.Take(ctx, other, 1)
	if err != nil || !o.Allowed {
		t.Fatalf("take of %s: %+v, %v", other, o, err)
	}
	hold.armed.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = l.Take(ctx, "k", 1)
	}()
	<-hold.ran
	if g, err := l.Refund(ctx, other, 1, o); err != nil || g != 1 {
		t.Fatalf("refund of %s: %d, %v", other, g, err)
	}
	close(hold.release)
	<-done
	before := statsOf(l)
	if d, _ := l.Take(ctx, "k", 1); d.Allowed {
		t.Fatalf("k is used up: %+v", d)
	}
	if after := statsOf(l); after.RoundTrips != before.RoundTrips || after.DenyCacheHits != before.DenyCacheHits+1 {
		t.Fatalf("the refusal of k was not remembered: round trips %d -> %d, deny cache hits %d -> %d",
			before.RoundTrips, after.RoundTrips, before.DenyCacheHits, after.DenyCacheHits)
	}
}
