package batched

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// testAddr is the shared redis-server that TestMain starts; tests that kill or pause a server
// start their own.
var testAddr string

// TestMain runs every test against a real redis-server on a free loopback port. Without
// redis-server on PATH it fails under CI=true and skips the package otherwise.
func TestMain(m *testing.M) {
	if os.Getenv("BATCHED_CHILD") != "" {
		// A fleet process of TestOutageProcesses: no server of its own, no tests.
		redis.SetLogger(nopLogger{})
		os.Exit(runChild())
	}
	// The outage tests make go-redis log every failed dial.
	redis.SetLogger(nopLogger{})
	srv, err := redistest.Start()
	if err != nil {
		if errors.Is(err, redistest.ErrNotInstalled) && os.Getenv("CI") != "true" {
			fmt.Println("batched: SKIP: redis-server is not installed (apt-get install redis-server); CI=true makes this a failure")
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "batched:", err)
		os.Exit(1)
	}
	testAddr = srv.Addr
	os.Setenv("REDIS_ADDR", srv.Addr)
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := goleak.Find(clientDialer); err != nil {
			fmt.Fprintln(os.Stderr, "batched: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newClient returns a client for addr, closed at the end of the test.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16, DisableIdentity: true, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func flushAll(t testing.TB, c *redis.Client) {
	t.Helper()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
}

// withManualExchange starts no exchange goroutine: the test calls exchange itself, which makes
// runs under a manual clock deterministic.
func withManualExchange() Option {
	return func(cfg *config) error {
		cfg.manual = true
		return nil
	}
}

// step runs one exchange now, as the goroutine would.
func (l *Limiter) step() {
	l.syncMu.Lock()
	l.exchange(l.clk.Now())
	l.syncMu.Unlock()
}

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}
