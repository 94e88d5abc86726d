package redisstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// syncBuffer is a bytes.Buffer that slog's handler may write from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startReplica starts a master and a read-only replica of it, and returns a client of the replica.
func startReplica(t *testing.T) *redis.Client {
	t.Helper()
	master := startServer(t)
	host, port, err := net.SplitHostPort(master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	replica, err := redistest.Start("--replicaof", host, port)
	if err != nil {
		t.Fatalf("start the replica: %v", err)
	}
	t.Cleanup(replica.Stop)
	c := redis.NewClient(&redis.Options{Addr: replica.Addr, DisableIdentity: true, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestReadOnlyReplicaSaysWhy points a limiter with no WithOnError hook at a read-only replica,
// where every script's write gets READONLY. The breaker opens, and from then on each call is
// decided without Redis: the error must still name the cause, and the opening must be logged
// once, since nothing else would tell an operator that limiting now follows the failure choice.
func TestReadOnlyReplicaSaysWhy(t *testing.T) {
	c := startReplica(t)
	logged := new(syncBuffer)
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logged, nil)))
	defer slog.SetDefault(prev)

	l, err := New(c, "replica", policy.SlidingCounter{Limit: 5, Window: time.Minute}, WithOnFailure(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	var last error
	for i := range 3 * DefaultBreakerMinCalls {
		d, err := l.Take(ctx, "k", 1)
		if d.Allowed || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d on a read-only replica with FailClosed: %+v, %v; want refused with ErrUnavailable", i, d, err)
		}
		last = err
	}
	if st := statsOf(l); !st.BreakerOpen {
		t.Fatalf("breaker closed after %d READONLY replies", 3*DefaultBreakerMinCalls)
	}
	if !errors.Is(last, ErrCircuitOpen) || !strings.Contains(last.Error(), "READONLY") {
		t.Errorf("a call refused by the open breaker: %v; want ErrCircuitOpen naming READONLY", last)
	}
	if errors.Is(last, context.DeadlineExceeded) {
		t.Errorf("the open breaker's error %v reads as the caller's deadline", last)
	}
	out := logged.String()
	if n := strings.Count(out, "circuit breaker opened"); n != 1 || !strings.Contains(out, "READONLY") {
		t.Errorf("log without a WithOnError hook:\n%s\nwant the opening logged once, naming READONLY", out)
	}

	// With a hook, the hook hears of each failure and the default logger of none.
	logged = new(syncBuffer)
	slog.SetDefault(slog.New(slog.NewTextHandler(logged, nil)))
	var hooked errLog
	l2, err := New(c, "replica2", policy.SlidingCounter{Limit: 5, Window: time.Minute}, WithOnError(hooked.add))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	for range 2 * DefaultBreakerMinCalls {
		_, _ = l2.Take(ctx, "k", 1)
	}
	if len(hooked.all()) == 0 || strings.Contains(logged.String(), "circuit breaker opened") {
		t.Errorf("with a hook: %d errors to the hook, log %q; want the hook's and no log line", len(hooked.all()), logged.String())
	}
}

// TestResetOnReadOnlyReplica: go-redis replays a command that gets READONLY until its deadline,
// so a Reset on a replica returned the limiter's timeout instead of the server's reason.
func TestResetOnReadOnlyReplica(t *testing.T) {
	l, err := New(startReplica(t), "replica", policy.SlidingCounter{Limit: 5, Window: time.Minute}, WithOnError(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = l.Reset(context.Background(), "k")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("Reset on a read-only replica: %v; want ErrUnavailable naming READONLY", err)
	}
}
