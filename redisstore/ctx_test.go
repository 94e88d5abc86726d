package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
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
	ownTimeoutIsNotTheCallers(t, "Take", err, 30*time.Millisecond)
	if st := statsOf(short); !st.BreakerOpen {
		t.Fatalf("the limiter's own timeout did not count: %+v", st)
	}
	// Reset, on a limiter whose breaker is still closed.
	reset, err := New(client, "ctx3", policy.FixedWindow{Limit: 100, Window: time.Minute},
		WithTimeout(30*time.Millisecond), WithOnFailure(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer reset.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	err = reset.Reset(ctx, "k")
	cancel()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reset at its own timeout on a paused server: %v, want ErrUnavailable", err)
	}
	ownTimeoutIsNotTheCallers(t, "Reset", err, 30*time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
}

// TestDeadlinesWithoutContextTimeout: New accepts a go-redis client with ContextTimeoutEnabled
// false whose read and write timeouts are no longer than WithTimeout's, and go-redis sets only
// those on the socket. A call to a paused server must still end at the caller's deadline, as
// Take, Refund, Reset and WithTimeout promise, with the caller's error and nothing counted
// against the store; and at the limiter's own timeout, as a store failure.
func TestDeadlinesWithoutContextTimeout(t *testing.T) {
	srv := startServer(t)
	// Far longer than the callers' deadlines below: a call that waited for the socket's timeouts
	// would take seconds.
	const socket = 5 * time.Second
	l := socketTimeoutsOnly(t, srv.Addr, "no-ctx-timeout", socket, WithBreaker(1, time.Minute), WithOnFailure(FailClosed))
	m, err := All(l)
	if err != nil {
		t.Fatal(err)
	}
	admitted, err := l.Take(context.Background(), "warm", 1)
	if err != nil || !admitted.Allowed {
		t.Fatalf("Take before the pause: %+v %v", admitted, err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	// Resumed before the client closes: the calls left waiting on the socket then end.
	defer func() { _ = srv.Resume() }()
	for _, c := range []struct {
		what string
		call func(context.Context) error
	}{
		{"Take", func(ctx context.Context) error { _, err := l.Take(ctx, "k", 1); return err }},
		{"TakeWithLimit", func(ctx context.Context) error { _, err := l.TakeWithLimit(ctx, "k", 1, 5); return err }},
		{"All's Take", func(ctx context.Context) error { _, err := m.Take(ctx, "k", 1); return err }},
		{"Refund", func(ctx context.Context) error { _, err := l.Refund(ctx, "warm", 1, admitted); return err }},
		{"Reset", func(ctx context.Context) error { return l.Reset(ctx, "k") }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		start := time.Now()
		err := c.call(ctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) || took > faultSlack {
			t.Fatalf("%s with a 30ms deadline on a paused server: %v after %v; want context.DeadlineExceeded at the deadline", c.what, err, took)
		}
	}
	if st := statsOf(l); st.BreakerOpen || st.Failures != 0 {
		t.Fatalf("the callers' deadlines counted against the store: %+v", st)
	}
	// The limiter's own timeout, shorter than the caller's deadline: a store failure.
	const timeout = 100 * time.Millisecond
	own := socketTimeoutsOnly(t, srv.Addr, "no-ctx-timeout-own", timeout, WithBreaker(1, time.Minute), WithOnFailure(FailClosed), WithOnError(func(error) {}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	d, err := own.Take(ctx, "k", 1)
	if took := time.Since(start); !errors.Is(err, ErrUnavailable) || d.Allowed || took > timeout+faultSlack {
		t.Fatalf("the limiter's own %v timeout on a paused server: %+v %v after %v; want ErrUnavailable at the timeout", timeout, d, err, took)
	}
	ownTimeoutIsNotTheCallers(t, "Take", err, timeout)
	if st := statsOf(own); !st.BreakerOpen {
		t.Fatalf("the limiter's own timeout did not count against the store: %+v", st)
	}
}

// ownTimeoutIsNotTheCallers fails t unless err, a call's failure at the limiter's own timeout d
// with the caller's context alive, says so in one way whichever of the context's timer and the
// socket's deadline fired first, and does not read as the caller's deadline to errors.Is.
func ownTimeoutIsNotTheCallers(t *testing.T, what string, err error, d time.Duration) {
	t.Helper()
	want := fmt.Sprintf("no reply within %v, the limiter's timeout (WithTimeout)", d)
	if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s at the limiter's own timeout: %v; want %q, and not the caller's context.DeadlineExceeded", what, err, want)
	}
	var te interface{ Timeout() bool }
	if !errors.As(err, &te) || !te.Timeout() {
		t.Fatalf("%s at the limiter's own timeout: %v has no Timeout() true", what, err)
	}
}

// Close waits for a call that its caller gave up on at the deadline, through a client whose socket
// does not follow the deadline, so that no goroutine of the limiter outlives Close.
func TestCloseWaitsForCallsGivenUp(t *testing.T) {
	srv := startServer(t)
	const socket = 300 * time.Millisecond
	l := socketTimeoutsOnly(t, srv.Addr, "close-waits", socket, WithOnFailure(FailClosed), WithOnError(func(error) {}))
	if d, err := l.Take(context.Background(), "warm", 1); err != nil || !d.Allowed {
		t.Fatalf("Take before the pause: %+v %v", d, err)
	}
	leaks := goleak.IgnoreCurrent()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	start := time.Now()
	_, err := l.Take(ctx, "k", 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take with a 20ms deadline on a paused server: %v; want context.DeadlineExceeded", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The call given up on ends at the socket's timeout; Close returns only after it.
	if took := time.Since(start); took < socket {
		t.Fatalf("Close returned %v after the call began, before the socket's %v timeout ended it", took, socket)
	}
	goleak.VerifyNone(t, leaks)
}

// socketTimeoutsOnly returns a limiter (a fixed window of 100 a minute, WithTimeout(socket), and
// opts) on a client of the server at addr that sets only its own read and write timeouts, socket,
// on the socket, not its callers' deadlines (ContextTimeoutEnabled false). Both are closed when
// the test ends, the limiter first.
func socketTimeoutsOnly(t *testing.T, addr, name string, socket time.Duration, opts ...Option) *Limiter {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, ReadTimeout: socket, WriteTimeout: socket, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	l, err := New(client, name, policy.FixedWindow{Limit: 100, Window: time.Minute}, append([]Option{WithTimeout(socket)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// wrappedClient is a client of a type New cannot look inside, as an instrumenting wrapper is.
type wrappedClient struct{ *redis.Client }

// A client of another type (a wrapper) is not looked inside, so its calls are bounded as those of
// a client whose socket does not follow the deadline: a call to a paused server ends at the
// caller's deadline and at the limiter's timeout, though the wrapped client's socket waits 5s.
func TestDeadlinesThroughAWrapper(t *testing.T) {
	srv := startServer(t)
	const socket = 5 * time.Second
	inner := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, ReadTimeout: socket, WriteTimeout: socket, MaxRetries: -1})
	t.Cleanup(func() { inner.Close() })
	const timeout = 100 * time.Millisecond
	l, err := New(wrappedClient{inner}, "wrapped", policy.FixedWindow{Limit: 100, Window: time.Minute},
		WithTimeout(timeout), WithOnFailure(FailClosed), WithOnError(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	warmThenPause(t, srv, l)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	start := time.Now()
	_, err = l.Take(ctx, "k", 1)
	cancel()
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > faultSlack {
		t.Fatalf("Take with a 30ms deadline through a wrapper on a paused server: %v after %v; want context.DeadlineExceeded at the deadline", err, took)
	}
	start = time.Now()
	d, err := l.Take(context.Background(), "k", 1)
	if took := time.Since(start); !errors.Is(err, ErrUnavailable) || d.Allowed || took > timeout+faultSlack {
		t.Fatalf("the limiter's own %v timeout through a wrapper: %+v %v after %v; want ErrUnavailable at the timeout", timeout, d, err, took)
	}
}

// warmThenPause makes one call through l while srv answers, so that its connection is open, then
// pauses srv until the test ends.
func warmThenPause(t *testing.T, srv *redistest.Server, l *Limiter) {
	t.Helper()
	if d, err := l.Take(context.Background(), "warm", 1); err != nil || !d.Allowed {
		t.Fatalf("Take before the pause: %+v %v", d, err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })
}

// slowAfterReply holds an error reply from the server for d before the client returns it, as a
// hook, a GC pause or a preemption can: the reply then reaches the limiter past its deadline.
type slowAfterReply struct{ d time.Duration }

func (h slowAfterReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowAfterReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h slowAfterReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		var reply redis.Error
		if errors.As(err, &reply) && !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			time.Sleep(h.d)
		}
		return err
	}
}

// A server's reply about one key, read past the limiter's own deadline, is still that reply: not
// the limiter's timeout, which would count against the store (opening the breaker for every key)
// and skip the hiding of the key's subject.
func TestLateReplyIsNotATimeout(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, testAddr)
	c.AddHook(slowAfterReply{40 * time.Millisecond})
	l, err := New(c, "late-reply", policy.SlidingCounter{Limit: 5, Window: time.Second},
		WithTimeout(20*time.Millisecond), WithBreaker(1, time.Minute), WithOnFailure(FailClosed), WithOnError(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := c.LPush(ctx, l.Key("secret-subject"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = l.Take(ctx, "secret-subject", 1)
	var reply redis.Error
	if !errors.As(err, &reply) || strings.Contains(err.Error(), "no reply within") || strings.Contains(err.Error(), "secret-subject") {
		t.Fatalf("a late WRONGTYPE reply: %v; want the server's reply, its key's subject hidden", err)
	}
	if st := statsOf(l); st.BreakerOpen || st.BreakerOpens != 0 {
		t.Fatalf("one key's late reply opened the breaker for every key: %+v", st)
	}
}
