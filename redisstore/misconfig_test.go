package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// errLog collects what the WithOnError hook receives.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (e *errLog) add(err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
}

func (e *errLog) all() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.errs...)
}

// connectionsReceived reads the server's total_connections_received.
func connectionsReceived(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no total_connections_received in INFO stats")
	return 0
}

// misconfigured runs 200 calls for 200 keys through l and checks that all fail with
// ErrMisconfigured naming want, that the hook heard of it exactly once, and that the breaker
// kept all but the first (and at most a probe or two) off the server.
func misconfigured(t *testing.T, l *Limiter, log *errLog, want string) {
	t.Helper()
	ctx := context.Background()
	for i := range 200 {
		d, err := l.Take(ctx, fmt.Sprint("key", i), 1)
		if !errors.Is(err, ErrMisconfigured) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Fatalf("call %d: err = %v, want ErrMisconfigured naming %q", i, err, want)
		}
		if d.Allowed {
			t.Fatalf("call %d: fail-closed admitted: %+v", i, d)
		}
	}
	st := statsOf(l)
	if st.RoundTrips > 3 || st.BreakerOpens != 1 || !st.BreakerOpen {
		t.Fatalf("200 calls made %d round trips (breaker opens %d, open %v); want the first and at most a probe or two",
			st.RoundTrips, st.BreakerOpens, st.BreakerOpen)
	}
	errs := log.all()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
		t.Fatalf("the hook heard %d errors (%v), want exactly one naming %q", len(errs), errs, want)
	}
	t.Logf("%d calls: %d round trips; reported once: %v", st.Calls, st.RoundTrips, errs[0])
}

func TestWrongPasswordOpensBreaker(t *testing.T) {
	srv, err := redistest.Start("--requirepass", "s3cret-pw")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "s3cret-pw", DisableIdentity: true})
	defer admin.Close()
	wrong := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "not-it", DisableIdentity: true, ContextTimeoutEnabled: true})
	defer wrong.Close()
	var log errLog
	l, err := New(wrong, "auth", policy.FixedWindow{Limit: 10, Window: time.Second}, WithOnFailure(FailClosed), WithOnError(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := connectionsReceived(t, admin)
	misconfigured(t, l, &log, "WRONGPASS")
	// The admin's own INFO connection is already open; every other new one is the limiter's.
	if conns := connectionsReceived(t, admin) - before; conns > 3 {
		t.Fatalf("200 calls with a wrong password opened %d connections, want at most 3", conns)
	}
	if strings.Contains(log.all()[0].Error(), "not-it") {
		t.Fatalf("the report contains the password: %v", log.all()[0])
	}
}

// A database the server does not have fails the SELECT of every new connection: an error every
// key gets, so the breaker opens at once instead of each call dialling again.
func TestMissingDatabaseOpensBreaker(t *testing.T) {
	srv, err := redistest.Start("--databases", "4")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer admin.Close()
	missing := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 9, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer missing.Close()
	var log errLog
	l, err := New(missing, "db", policy.FixedWindow{Limit: 10, Window: time.Second}, WithOnFailure(FailClosed), WithOnError(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := connectionsReceived(t, admin)
	misconfigured(t, l, &log, "DB index is out of range")
	if conns := connectionsReceived(t, admin) - before; conns > 3 {
		t.Fatalf("200 calls selecting a missing database opened %d connections, want at most 3", conns)
	}
}

// A client name the server refuses fails the CLIENT SETNAME of every new connection, as a
// missing database does: NewClient refuses it, and through a client built by hand the breaker
// opens at once instead of each call dialling again.
func TestBadClientNameOpensBreaker(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	for _, name := range []string{"a b", "a\nb", "café"} {
		if c, err := NewClient("redis://" + srv.Addr + "?client_name=" + url.QueryEscape(name)); err == nil || !strings.Contains(err.Error(), "client_name") {
			if c != nil {
				c.Close()
			}
			t.Errorf("NewClient with client_name %q: %v; want an error naming client_name", name, err)
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer admin.Close()
	named := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: "a b", DisableIdentity: true, ContextTimeoutEnabled: true})
	defer named.Close()
	var log errLog
	l, err := New(named, "cn", policy.FixedWindow{Limit: 10, Window: time.Second}, WithOnFailure(FailClosed), WithOnError(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := connectionsReceived(t, admin)
	misconfigured(t, l, &log, "Client names cannot contain")
	if conns := connectionsReceived(t, admin) - before; conns > 3 {
		t.Fatalf("200 calls with a name the server refuses opened %d connections, want at most 3", conns)
	}
}

func TestNoPermissionOpensBreaker(t *testing.T) {
	l, log := aclLimiter(t, "noscripts", "-evalsha", "-eval")
	misconfigured(t, l, log, "NOPERM")
}

// TestNoPermissionInsideScriptOpensBreaker: a user who may run the scripts but not a command or
// key they use is refused from inside the script. Redis 7.0 and 7.1 word that as an ERR reply, not
// NOPERM; it is still an error every key gets.
func TestNoPermissionInsideScriptOpensBreaker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []string
	}{
		{"set", []string{"-set"}},
		{"get", []string{"-get"}},
		{"time", []string{"-time"}},
		{"keys", []string{"resetkeys", "~other:*"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, log := aclLimiter(t, "noperm-"+tc.name, tc.rules...)
			misconfigured(t, l, log, "lacks a permission")
		})
	}
}

// aclLimiter returns a FailClosed limiter (10 per second, fixed window) on the shared server whose
// client connects as Redis user user, made with ACL SETUSER's rules on top of every permission
// (+@all), and the log of its WithOnError hook. The user, limiter and client go when the test ends.
func aclLimiter(t *testing.T, user string, rules ...string) (*Limiter, *errLog) {
	t.Helper()
	admin := newClient(t, testAddr)
	args := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "+@all"}, anySlice(rules)...)
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	c := redis.NewClient(&redis.Options{Addr: testAddr, Username: user, Password: "pw", DisableIdentity: true, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	log := &errLog{}
	l, err := New(c, user, policy.FixedWindow{Limit: 10, Window: time.Second}, WithOnFailure(FailClosed), WithOnError(log.add))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, log
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func TestNoScriptingOpensBreaker(t *testing.T) {
	srv, err := redistest.Start("--rename-command", "EVALSHA", "", "--rename-command", "EVAL", "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer c.Close()
	var log errLog
	l, err := New(c, "noscript", policy.FixedWindow{Limit: 10, Window: time.Second}, WithOnFailure(FailClosed), WithOnError(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	misconfigured(t, l, &log, "runs no Lua scripts")
}

// TestClusterNodeBehindPlainClient: a single-node client on one node of a two-node cluster gets
// MOVED for about half the keys. That is a misconfiguration of every key, not an answer about
// one: the breaker opens and the report names the cluster.
func TestClusterNodeBehindPlainClient(t *testing.T) {
	nodes := startCluster(t, 2)
	c := redis.NewClient(&redis.Options{Addr: nodes[0].Addr, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer c.Close()
	var log errLog
	l, err := New(c, "moved", policy.FixedWindow{Limit: 10, Window: time.Second}, WithOnFailure(FailClosed), WithOnError(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	// Find a key the node does not own, then check the rest as above.
	var moved error
	for i := 0; i < 100 && moved == nil; i++ {
		_, err := l.Take(ctx, fmt.Sprint("probe", i), 1)
		if err != nil {
			moved = err
		}
	}
	if !errors.Is(moved, ErrMisconfigured) || !strings.Contains(moved.Error(), "Redis Cluster node") || !strings.Contains(moved.Error(), "MOVED") {
		t.Fatalf("MOVED through a plain client: %v", moved)
	}
	if st := statsOf(l); !st.BreakerOpen {
		t.Fatalf("MOVED did not open the breaker: %+v", st)
	}
	if errs := log.all(); len(errs) != 1 {
		t.Fatalf("the hook heard %d errors, want 1: %v", len(errs), errs)
	}
}

// startCluster starts n cluster-enabled servers (with extra arguments each), splits the 16384
// slots between them, joins them and waits until every node reports cluster_state:ok.
func startCluster(t *testing.T, n int, extra ...string) []*redistest.Server {
	t.Helper()
	ctx := context.Background()
	var nodes []*redistest.Server
	var admins []*redis.Client
	for i := range n {
		srv, err := redistest.Start(append([]string{"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i)}, extra...)...)
		if err != nil {
			t.Fatalf("start cluster node: %v", err)
		}
		t.Cleanup(srv.Stop)
		nodes = append(nodes, srv)
		a := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
		t.Cleanup(func() { _ = a.Close() })
		admins = append(admins, a)
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
		}
	}
	for i := 1; i < n; i++ {
		host, port, _ := strings.Cut(nodes[i].Addr, ":")
		if err := admins[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("CLUSTER MEET: %v", err)
		}
	}
	for _, a := range admins {
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
	return nodes
}

// A master name no sentinel monitors (a typo in the URL's path) is an error every key gets: go-redis
// reports it as "all sentinels … unreachable" wrapping redis.Nil, the sentinels' empty answer,
// which read as a reply about one key, so the breaker never opened and every call asked the
// sentinels again.
func TestUnknownSentinelMasterOpensBreaker(t *testing.T) {
	master := startServer(t)
	sen, err := redistest.StartSentinel("mymaster", master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sen.Stop()
	c, err := NewClient("redis-sentinel://" + sen.Addr + "/nosuchmaster")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var log errLog
	l, err := New(c, "sen", policy.FixedWindow{Limit: 10, Window: time.Second}, WithOnFailure(FailClosed), WithOnError(log.add), WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	misconfigured(t, l, &log, "no sentinel knows the master")
}

// A sentinel URL that names a plain server's address is ErrMisconfigured naming that, not a
// server without scripting (the SENTINEL command it lacks is an unknown command too).
func TestSentinelURLAtAPlainServer(t *testing.T) {
	srv := startServer(t)
	for _, u := range []string{"redis-sentinel://" + srv.Addr + "/mymaster", "redis://" + srv.Addr + "?master=mymaster"} {
		c, err := NewClient(u)
		if err != nil {
			t.Fatal(err)
		}
		var log errLog
		l, err := New(c, "sen", policy.FixedWindow{Limit: 10, Window: time.Second}, WithOnFailure(FailClosed), WithOnError(log.add), WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		misconfigured(t, l, &log, "the sentinel address is a Redis server, not a sentinel")
		l.Close()
		c.Close()
	}
}
