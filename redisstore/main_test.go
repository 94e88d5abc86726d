package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// testAddr is the shared redis-server that TestMain starts; tests that kill or pause a server
// start their own.
var testAddr string

// TestMain runs every test against a real redis-server (or $SLIDELIMIT_REDIS_SERVER, such as
// valkey-server) on a free loopback port. It installs nothing: without the program on PATH it fails under CI=true and skips the package otherwise
// (the repository's test script installs it).
func TestMain(m *testing.M) {
	srv, err := redistest.Start()
	if err != nil {
		if errors.Is(err, redistest.ErrNotInstalled) && os.Getenv("CI") != "true" {
			fmt.Printf("redisstore: SKIP: %s is not installed (apt-get install redis-server); CI=true makes this a failure\n", redistest.Program())
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "redisstore:", err)
		os.Exit(1)
	}
	testAddr = srv.Addr
	os.Setenv("REDIS_ADDR", srv.Addr)
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "redisstore: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newClient returns a client for addr, closed at the end of the test, on an empty database.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16, DisableIdentity: true, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	return c
}

// TestServerProgram checks that the tests run against the program the harness was told to run:
// a Valkey run that silently fell back to Redis would prove nothing.
func TestServerProgram(t *testing.T) {
	info, err := newClient(t, testAddr).Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	wantValkey := strings.Contains(redistest.Program(), "valkey")
	if isValkey := strings.Contains(info, "valkey_version:") || strings.Contains(info, "server_name:valkey"); isValkey != wantValkey {
		t.Fatalf("running %s, but the server says valkey = %v", redistest.Program(), isValkey)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if strings.HasPrefix(line, "redis_version:") || strings.HasPrefix(line, "valkey_version:") {
			t.Logf("%s: %s", redistest.Program(), line)
		}
	}
}
