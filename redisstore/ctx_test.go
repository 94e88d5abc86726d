package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// TestCallerDeadlineIsNotAStoreFailure: a caller whose own deadline has passed (as behind
// http.TimeoutHandler) or who cancelled gets its context's error, and the breaker stays closed
// for everyone else, even with the most sensitive breaker.
func TestCallerDeadlineIsNotAStoreFailure(t *testing.T) {
	p := policy.SlidingCounter{Limit: 100, Window: time.Minute}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"expired deadline", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, context.DeadlineExceeded},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, "ctx", p, WithOnFailure(FailClosed), WithBreaker(1, time.Minute))
			ctx, cancel := tc.ctx()
			defer cancel()
			d, err := l.Take(ctx, "impatient", 1)
			if !errors.Is(err, tc.want) || errors.Is(err, ErrUnavailable) {
				t.Fatalf("Take with a done context: err = %v, want %v (not ErrUnavailable)", err, tc.want)
			}
			if d.Allowed {
				t.Fatalf("fail-closed admitted a done caller: %+v", d)
			}
			refused := 0
			for i := range 20 {
				d, err := l.Take(context.Background(), fmt.Sprint("healthy", i), 1)
				if err != nil || !d.Allowed {
					refused++
				}
			}
			if st := statsOf(l); refused > 0 || st.BreakerOpens != 0 {
				t.Fatalf("%d of 20 healthy calls refused after one caller's %v; stats %+v", refused, tc.want, st)
			}
		})
	}
}

// TestCallerDeadlineDuringCall: the caller's deadline ends a call to a paused server before the
// limiter's own timeout would; the breaker must not count it. The limiter's own timeout, on the
// same paused server, must.
func TestCallerDeadlineDuringCall(t *testing.T) {
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer client.Close()
	l, err := New(client, "ctx", policy.FixedWindow{Limit: 100, Window: time.Minute},
		WithTimeout(5*time.Second), WithBreaker(1, time.Minute), WithOnFailure(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Take(context.Background(), "warm", 1); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, err = l.Take(ctx, "k", 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("caller deadline on a paused server: err = %v", err)
	}
	if st := statsOf(l); st.BreakerOpen || st.BreakerOpens != 0 {
		t.Fatalf("the caller's deadline opened the breaker: %+v", st)
	}
	// The limiter's own deadline is a store failure.
	short, err := New(client, "ctx2", policy.FixedWindow{Limit: 100, Window: time.Minute},
		WithTimeout(30*time.Millisecond), WithBreaker(1, time.Minute), WithOnFailure(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	d, err := short.Take(ctx, "k", 1)
	cancel()
	if !errors.Is(err, ErrUnavailable) || d.Allowed || d.Reason != engine.ReasonLimited {
		t.Fatalf("own timeout on a paused server: %+v, %v", d, err)
	}
	if st := statsOf(short); !st.BreakerOpen {
		t.Fatalf("the limiter's own timeout did not count: %+v", st)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
}
