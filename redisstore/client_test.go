package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// TestNewClientNeverPrintsThePassword: malformed and valid URLs alike, neither an error from
// NewClient nor RedactURL contains the password, in any of its spellings.
func TestNewClientNeverPrintsThePassword(t *testing.T) {
	const pw = "hunter2secret"
	urls := []string{
		"redis://user:" + pw + "@127.0.0.1:notaport",
		"redis://:" + pw + "@[::1",
		"redis://u:" + pw + "@@127.0.0.1:6379",
		"redis://u:hunt@er2secret@127.0.0.1:6379/notadb",
		"redis://u:" + pw + "@127.0.0.1:6379/99999999999999999999",
		"redis://u:" + pw + "@127.0.0.1:6379?bogus_option=1",
		"rediss://u:" + pw + "@127.0.0.1:1?dial_timeout=nope",
		"redis://127.0.0.1:1?password=" + pw + "&bogus=1",
		"redis://u:" + pw + "@127.0.0.1:6379?master=m&pool_size=x",
		"redis-sentinel://u:" + pw + "@127.0.0.1:notaport/m",
		"redis-sentinel://u:" + pw + "@127.0.0.1:26379/",
		"redis-sentinel://u:" + pw + "@127.0.0.1:26379/m?sentinel_password=" + pw + "&bogus=1",
		"unix://u:" + pw + "@/tmp/none.sock?db=x",
		"http://u:" + pw + "@127.0.0.1",
		" redis://u:" + pw + "@127.0.0.1:6379",
		"u:" + pw + "@127.0.0.1:6379",
		"redis://u:hunter%32secret@127.0.0.1:6379/x",
		"redis://u:hunter2/secret@127.0.0.1:6379",
		"redis://u:hunter2?secret@127.0.0.1:6379",
		"redis://u:hunter2?x@127.0.0.1:1",
		"redis://u:hu?nter2secret@127.0.0.1:1",
		// A '?' in a sentinel URL's password ended the host list early; the list's ',' then split
		// the password into a host and a port that an error quoted.
		"redis-sentinel://u:hunter2,top?secret@127.0.0.1:26379/mymaster",
		"redis-sentinel://u:hunter2:top,x?y@127.0.0.1:1/m",
		"redis-sentinel://u:a,hunter2?y@127.0.0.1:1/m",
		"redis-sentinel://u:hunter2/secret,x?y@127.0.0.1:1/m",
	}
	for _, u := range urls {
		secret := pw
		switch {
		case strings.Contains(u, "hunt@er2"):
			secret = "hunt@er2secret"
		case strings.Contains(u, "hunter%32"):
			secret = "hunter%32secret"
		case strings.Contains(u, "hunter2/"):
			secret = "hunter2/secret"
		case strings.Contains(u, "hunter2?secret"):
			secret = "hunter2?secret"
		case strings.Contains(u, "hunter2?x"):
			secret = "hunter2"
		case strings.Contains(u, "hu?nter2"):
			secret = "nter2secret"
		case strings.Contains(u, "hunter2,top?"):
			secret = "hunter2"
		case strings.Contains(u, "hunter2:top"):
			secret = "top"
		case strings.Contains(u, "u:a,hunter2"):
			secret = `"a"`
		case strings.Contains(u, "hunter2/secret,"):
			secret = "hunter2"
		}
		red := RedactURL(u)
		for _, leak := range []string{secret, pw, "secret"} {
			if strings.Contains(red, leak) {
				t.Errorf("RedactURL(%q) = %q: contains %q", u, red, leak)
			}
		}
		c, err := NewClient(u)
		if err == nil {
			// Some of these parse (a '@' in a password is taken as part of it): no error to leak.
			_ = c.Close()
			continue
		}
		for _, leak := range []string{secret, pw, "secret"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("NewClient(%q): error %q contains %q", u, err, leak)
			}
		}
	}
	// A short password, or one that is a word of the message, is hidden where the URL holds it
	// and nowhere else: the message reads as it would with a long password. Replaced everywhere,
	// "o" made "redisstxxxxxre: … pxxxxxrt", and "redis" made "xxxxx: invalid database number".
	// Nor is one that is a word of the message's own text: only the pieces of the URL that a message
	// quotes are scrubbed ("go-redis reads 0" became "go-xxxxx reads 0").
	for _, short := range []string{"o", "e", "p", "9", "x", "Redis", "redis", "go", "port", "invalid", "database", "timeout", "must"} {
		for _, shape := range []string{"redis://:%s@h:99999", "redis://:%s@h/abc", "redis://u:%s@h:6379?bogus_option=1", "redis-sentinel://u:%s@h:99999/m", "redis://:%s@h?dial_timeout=3&dial_timeout=0"} {
			_, long := NewClient(fmt.Sprintf(shape, pw))
			_, err := NewClient(fmt.Sprintf(shape, short))
			if long == nil || err == nil || err.Error() != long.Error() {
				t.Errorf("password %q in %s: error %v, want the same as for a long password: %v", short, shape, err, long)
			}
		}
	}
	// A password equal to a piece the quoted URL prints in clear (its port, database, an option's
	// name or value), or to a word of a go-redis, strconv or time message, is not hidden there
	// either: the gap beside the URL's "...:99999/0", or in "xxxxx syntax", gave it away.
	for _, c := range []struct{ shape, pw string }{
		{"redis://u:%s@127.0.0.1:99999/0", "99999"},
		{"redis://u:%s@127.0.0.1:6379/-1", "1"},
		{"redis://u:%s@127.0.0.1:6379/0?dial_timeout=zz", "zz"},
		{"redis://u:%s@127.0.0.1:6379/0?dial_timeout=zz", "duration"},
		{"redis://u:%s@127.0.0.1:6379/0?pool_size=abc", "invalid"},
		{"redis://u:%s@127.0.0.1:6379/0?pool_size=abc", "abc"},
		{"redis://u:%s@127.0.0.1:6379/0?bogus_opt=1", "bogus"},
		{"redis://u:%s@127.0.0.1:6379/0?bogus_opt=1", "bogus_opt"},
		{"redis://u:%s@127.0.0.1:6379/0?pool_timeout=-1s", "-"},
		{"redis://u:%s@127.0.0.1:6379/0?client_name=a%%20b", "b"},
		{"redis-sentinel://u:%s@127.0.0.1:6379/m?bogus=1", "bogus"},
		{"redis-sentinel://u:%s@127.0.0.1:99999/m", "99999"},
		{"redis-sentinel://u:%s@127.0.0.1:1/m?db=x", "x"},
		{"redis://:%s@127.0.0.1:1/0?max_retries=h%%75nter2", "hunter2"},
		{"redis-sentinel://:%s@127.0.0.1:1/m?db=h%%75nter2", "hunter2"},
	} {
		_, long := NewClient(fmt.Sprintf(c.shape, pw))
		_, err := NewClient(fmt.Sprintf(c.shape, c.pw))
		if long == nil || err == nil || err.Error() != long.Error() {
			t.Errorf("password %q in %s: error %v, want the same as for a long password: %v", c.pw, c.shape, err, long)
		}
	}
	// An invalid escape inside the password is not quoted from url.Parse's error.
	if _, err := NewClient("redis://:secret%g1@127.0.0.1:1/0"); err == nil || strings.Contains(err.Error(), "%g1") {
		t.Errorf("NewClient with an invalid escape in the password: error %v quotes it", err)
	}
	// An option's name may be spelled with percent escapes: the query's parser decodes it, so
	// "sentinel_pass%77ord" set the sentinel password, which was printed in clear.
	for _, u := range []string{
		"redis-sentinel://127.0.0.1:1/mymaster?sentinel_pass%77ord=" + pw,
		"redis-sentinel://127.0.0.1:1/mymaster?%73entinel_password=" + pw + "&db=1",
		"rediss://127.0.0.1:1/0?master=m&sentinel_pass%77ord=" + pw,
		"redis://127.0.0.1:1/0?PASS%57ORD=" + pw,
		// A sentinel URL's parser reads a '#' or ';' in a value as the password's; redacted up
		// to the '#', the rest was printed.
		"redis-sentinel://127.0.0.1:1/m?sentinel_password=#" + pw,
		"redis-sentinel://127.0.0.1:1/m?sentinel_password=hun#" + pw + "&db=x",
		"redis-sentinel://127.0.0.1:1/m?sentinel_password=hun;" + pw,
		// Names that mean a password option, decoded: a space, a '-'.
		"redis-sentinel://127.0.0.1:1/m/0?sentinel+password=" + pw,
		"redis-sentinel://127.0.0.1:1/m?sentinel-password=" + pw,
		"redis://127.0.0.1:1/0?my-password=" + pw,
		// After a ';', behind an option whose value runs to the next '&'.
		"redis-sentinel://127.0.0.1:1/m?db=1;sentinel_password=" + pw,
		"redis://127.0.0.1:1/0?db=1;password=" + pw,
		"redis://127.0.0.1:1/0?sentinel_password=a;password=" + pw + "&db=1",
	} {
		if red := RedactURL(u); strings.Contains(red, pw) {
			t.Errorf("RedactURL(%q) = %q: contains the password", u, red)
		}
		c, err := NewClient(u)
		if err != nil && strings.Contains(err.Error(), pw) {
			t.Errorf("NewClient(%q): error %q contains the password", u, err)
		}
		if c != nil {
			_ = c.Close()
		}
	}
	// A path segment is no option: nothing after it is hidden.
	if got := RedactURL("http://h/reset-password=1?k=v"); got != "http://h/reset-password=1?k=v" {
		t.Errorf("RedactURL of a path segment ending in password= = %q", got)
	}
	if got := RedactURL("redis://h/0?db=1;password=" + pw + "&x=2"); got != "redis://h/0?db=1;password=xxxxx&x=2" {
		t.Errorf("RedactURL of a password option after a ';' = %q", got)
	}
	if got := RedactURL("redis://alice:" + pw + "@host:6379/2?dial_timeout=1s"); got != "redis://alice:xxxxx@host:6379/2?dial_timeout=1s" {
		t.Errorf("RedactURL of a plain URL = %q", got)
	}
	if got := RedactURL("redis://host:6379"); got != "redis://host:6379" {
		t.Errorf("RedactURL without a password = %q", got)
	}
	// Both passwords hidden, and nothing else: the host and the option names between them stay
	// readable. They were taken for one secret spanning from the first password to the second.
	_, err := NewClient("redis-sentinel://u:" + pw + "@127.0.0.1:26379/m?sentinel_password=" + pw + "&bogus=1")
	want := `redisstore: sentinel URL "redis-sentinel://u:xxxxx@127.0.0.1:26379/m?sentinel_password=xxxxx&bogus=1": unknown option "bogus" (known: sentinel_username, sentinel_password,`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("NewClient with two passwords: error %v, want it to start %s", err, want)
	}
}

// takeAll checks that a limiter on c decides n keys, 3 admitted and the 4th refused each.
func takeAll(t *testing.T, c redis.UniversalClient, n int) {
	t.Helper()
	l, err := New(c, "url", policy.FixedWindow{Limit: 3, Window: time.Minute}, WithClock(clock.NewManual(1_000_000)), WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for k := range n {
		key := fmt.Sprint("key", k)
		_ = l.Reset(ctx, key)
		for i := range 4 {
			d, err := l.Take(ctx, key, 1)
			if err != nil {
				t.Fatalf("Take(%s) #%d: %v", key, i, err)
			}
			if d.Allowed != (i < 3) {
				t.Fatalf("Take(%s) #%d: allowed %v", key, i, d.Allowed)
			}
		}
	}
}

func TestNewClientForms(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		c, err := NewClient("redis://" + testAddr + "/0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, ok := c.(*redis.Client); !ok {
			t.Fatalf("NewClient gave %T for a single node", c)
		}
		takeAll(t, c, 5)
	})
	t.Run("unix", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "redis.sock")
		srv, err := redistest.Start("--unixsocket", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		c, err := NewClient("unix://" + sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		takeAll(t, c, 5)
	})
	t.Run("password", func(t *testing.T) {
		srv, err := redistest.Start("--requirepass", "p@ss/word")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		c, err := NewClient("redis://:p%40ss%2Fword@" + srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		takeAll(t, c, 2)
		_, err = NewClient("redis://:wrong-one@" + srv.Addr)
		if err == nil || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "wrong-one") {
			t.Fatalf("NewClient with a wrong password: %v", err)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		nodes := startCluster(t, 2)
		c, err := NewClient("redis://" + nodes[1].Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, ok := c.(*redis.ClusterClient); !ok {
			t.Fatalf("NewClient gave %T for a cluster node", c)
		}
		takeAll(t, c, 30)
		if _, err := NewClient("redis://" + nodes[0].Addr + "/3"); err == nil || !strings.Contains(err.Error(), "Redis Cluster node") {
			t.Fatalf("a cluster URL naming database 3: %v", err)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		master := startServer(t)
		sen, err := redistest.StartSentinel("mymaster", master.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer sen.Stop()
		for _, u := range []string{"redis-sentinel://" + sen.Addr + "/mymaster", "redis://" + sen.Addr + "?master=mymaster"} {
			c, err := NewClient(u)
			if err != nil {
				t.Fatal(err)
			}
			takeAll(t, c, 3)
			// The keys are on the master the sentinel named.
			direct := redis.NewClient(&redis.Options{Addr: master.Addr, DisableIdentity: true})
			n, err := direct.DBSize(context.Background()).Result()
			_ = direct.Close()
			_ = c.Close()
			if err != nil || n == 0 {
				t.Fatalf("%s: the master holds %d keys (%v)", u, n, err)
			}
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		c, err := NewClient("redis://127.0.0.1:1")
		if err != nil {
			t.Fatalf("an unreachable server: %v", err)
		}
		_ = c.Close()
	})
}

// TestNewClientRefusesBadPoolSizes: pool sizes go-redis would panic on are an error naming the
// option, in every URL form, and no option makes NewClient panic.
// A port outside [1, 65535], a negative database, or a dial or pool timeout of 0 or less is refused
// with the URL, as the sentinel form refuses them, rather than dialled or read as database 0.
func TestNewClientRefusesBadPortsAndDatabases(t *testing.T) {
	for u, want := range map[string]string{
		"redis://127.0.0.1:99999":   `port "99999" is not in [1, 65535]`,
		"redis://127.0.0.1:0":       `port "0" is not in [1, 65535]`,
		"rediss://127.0.0.1:70000/": `port "70000" is not in [1, 65535]`,
		"redis://127.0.0.1:6379/-1": `database "-1" is negative`,
		// go-redis reads these as no timeout, and every dial (or wait for a connection) then
		// failed at once, against a live server too.
		"redis://127.0.0.1:1?dial_timeout=-1s":  `dial_timeout = "-1s": must be positive`,
		"rediss://127.0.0.1:1?dial_timeout=0":   `dial_timeout = "0": must be positive`,
		"unix:///tmp/none.sock?pool_timeout=-5": `pool_timeout = "-5": must be positive`,
		"redis://127.0.0.1:1?pool_timeout=-1ms": `pool_timeout = "-1ms": must be positive`,
	} {
		c, err := NewClient(u)
		if err == nil {
			_ = c.Close()
			t.Errorf("NewClient(%q) succeeded; want an error", u)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewClient(%q) = %v; want it to say %s", u, err, want)
		}
	}
}

// RedactText hides a URL's password in any message that quotes it, whole or in part, and nothing
// else, however short the password.
func TestRedactText(t *testing.T) {
	for _, c := range []struct{ msg, raw, want string }{
		{`Get "http://u:o@h/": dial tcp: connect: connection refused`, "http://u:o@h/", `Get "http://u:xxxxx@h/": dial tcp: connect: connection refused`},
		{`password "o" refused; port "99999"`, "redis://:o@h:99999", `password "xxxxx" refused; port "99999"`},
		{`WRONGPASS for s3cret-pw`, "redis://:s3cret-pw@h", `WRONGPASS for xxxxx`},
		{`redis: no host in "redis://:redis@"`, "redis://:redis@", `redis: no host in "redis://:xxxxx@"`},
		{"nothing to hide", "", "nothing to hide"},
	} {
		if got := RedactText(c.msg, c.raw); got != c.want {
			t.Errorf("RedactText(%q, %q) = %q, want %q", c.msg, c.raw, got, c.want)
		}
	}
}

func TestNewClientRefusesBadPoolSizes(t *testing.T) {
	for _, u := range []string{
		"redis://127.0.0.1:1?pool_size=-1",
		"redis://127.0.0.1:1?pool_size=3000000000",
		"unix:///tmp/nowhere.sock?pool_size=-1",
		"redis://127.0.0.1:1?min_idle_conns=-1",
		"redis://127.0.0.1:1?max_idle_conns=-5",
		"redis://127.0.0.1:1?max_active_conns=-1",
		"redis://127.0.0.1:1?master=m&pool_size=3000000000",
		"redis-sentinel://127.0.0.1:1/m?pool_size=-1",
		"redis-sentinel://127.0.0.1:1/m?pool_size=3000000000",
	} {
		c, err := NewClient(u)
		if err == nil {
			_ = c.Close()
			t.Errorf("NewClient(%q) succeeded; want an error naming the pool option", u)
			continue
		}
		if !strings.Contains(err.Error(), "pool_size") && !strings.Contains(err.Error(), "_conns") {
			t.Errorf("NewClient(%q) = %v; want the error to name the option", u, err)
		}
	}
}

// A sentinel URL has no TLS form, so rediss:// with master= is refused rather than sent in clear;
// a negative timeout in a sentinel URL, which go-redis reads as "set no deadline at all" (the
// context's included), is refused with the option's name.
func TestNewClientSentinelRefusals(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"rediss://:secret@127.0.0.1:26379?master=mymaster", "sentinel over TLS (rediss:// with master=) is not supported"},
		{"redis-sentinel://127.0.0.1:26379/mymaster?read_timeout=-1s", `read_timeout = "-1s" is negative`},
		{"redis-sentinel://127.0.0.1:26379/mymaster?write_timeout=-2ns", `write_timeout = "-2ns" is negative`},
		{"redis://127.0.0.1:26379?master=m&dial_timeout=-1s", `dial_timeout = "-1s" is negative`},
	} {
		c2, err := NewClient(c.url)
		if err == nil {
			c2.Close()
			t.Errorf("NewClient(%q) = a client, want an error with %q", c.url, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("NewClient(%q) = %v, want an error with %q and no password", c.url, err, c.want)
		}
	}
}

// New refuses a client whose negative timeouts make go-redis set no socket deadline: against a
// paused server such a client's calls outlast every deadline.
func TestNewRefusesAClientWithoutSocketDeadlines(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, ReadTimeout: -2, WriteTimeout: -2})
	defer c.Close()
	_, err := New(c, "nodeadline", policy.SlidingCounter{Limit: 5, Window: time.Second}, WithTimeout(50*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "no socket deadline") {
		t.Fatalf("New with ReadTimeout -2: %v, want an error saying no socket deadline is set", err)
	}
}

// A redis:// URL naming a cluster node keeps every option it set in the cluster client it gets.
func TestClusterURLKeepsItsOptions(t *testing.T) {
	nodes := startCluster(t, 1)
	c, err := NewClient("redis://" + nodes[0].Addr + "?max_active_conns=3&pool_fifo=true&min_retry_backoff=5ms&max_concurrent_dials=2&pipeline_pool_size=4")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("got %T for a cluster node", c)
	}
	o := cc.Options()
	if o.MaxActiveConns != 3 || !o.PoolFIFO || o.MinRetryBackoff != 5*time.Millisecond || o.MaxConcurrentDials != 2 || o.PipelinePoolSize != 4 {
		t.Fatalf("the cluster client lost the URL's options: MaxActiveConns %d, PoolFIFO %v, MinRetryBackoff %v, MaxConcurrentDials %d, PipelinePoolSize %d",
			o.MaxActiveConns, o.PoolFIFO, o.MinRetryBackoff, o.MaxConcurrentDials, o.PipelinePoolSize)
	}
}

// A Redis that refuses connections fails a call at once, with the refusal: go-redis's default
// five dial retries, 100ms apart, made each call wait out the limiter's deadline and report only
// that it passed. Port 1 on loopback has nothing listening.
func TestNewClientFailsARefusedDialAtOnce(t *testing.T) {
	c, err := NewClient("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := New(c, "dial", policy.FixedWindow{Limit: 5, Window: time.Minute}, WithTimeout(300*time.Millisecond),
		WithOnFailure(FailClosed), WithOnError(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.Take(context.Background(), "k", 1)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Take against a port that refuses connections: %v; want the refusal, not the deadline", err)
	}
}

// After a cluster master fails and its replica is promoted, a client from NewClient finds the
// new master within seconds. The limiters' scripts are never retried, so a dead node's connection
// errors never made go-redis reload the cluster's map: the failed master's slots went on failing
// (under the default FailOpen, unlimited) until the periodic reload, 60s by default.
func TestClusterFailoverIsFoundWithinSeconds(t *testing.T) {
	ctx := context.Background()
	// Three masters: a failover needs a majority of them to vote for the replica.
	nodes := startCluster(t, 3, "--cluster-node-timeout", "500")
	replica, err := redistest.Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes-replica.conf", "--cluster-node-timeout", "500")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Stop)
	admin := func(addr string) *redis.Client {
		a := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		t.Cleanup(func() { _ = a.Close() })
		return a
	}
	ra, ma := admin(replica.Addr), admin(nodes[1].Addr)
	host, port, _ := strings.Cut(nodes[0].Addr, ":")
	if err := ra.ClusterMeet(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	id, err := ma.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	waitUntil := func(what string, limit time.Duration, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > limit {
				t.Fatalf("%s: not after %v", what, limit)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return time.Since(start)
	}
	waitUntil("the replica knows its master", 10*time.Second, func() bool { return ra.Do(ctx, "CLUSTER", "REPLICATE", id).Err() == nil })
	waitUntil("the replica is in sync", 10*time.Second, func() bool {
		info, _ := ra.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})

	c, err := NewClient("redis://" + nodes[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := New(c, "failover", policy.SlidingCounter{Limit: 1000, Window: time.Minute}, WithTimeout(200*time.Millisecond),
		WithOnFailure(FailClosed), WithOnError(func(error) {}), WithBreaker(1<<20, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	allDecided := func() bool {
		for i := range 40 { // keys in both masters' slots
			if _, err := l.Take(ctx, "subject-"+strconv.Itoa(i), 1); err != nil {
				return false
			}
		}
		return true
	}
	// A new cluster client loads the slot map, dials and loads the script on its first calls,
	// which a loaded machine can stall past the timeout: not what this test is about.
	waitUntil("every key decided before the failover", 10*time.Second, allDecided)
	nodes[1].Kill()
	waitUntil("the replica is promoted", 20*time.Second, func() bool {
		info, _ := ra.Info(ctx, "replication").Result()
		return strings.Contains(info, "role:master")
	})
	took := waitUntil("every key decided again after the promotion", 15*time.Second, allDecided)
	t.Logf("every key decided again %v after the promotion", took.Round(time.Millisecond))
}

// A sentinel URL, in either form, gives a client that dials once, as a single node's does (see
// TestNewClientFailsARefusedDialAtOnce): with go-redis's five dials, 100ms apart, every call while
// the master was down waited out its deadline (404ms a call against 0 for the same dead master
// named directly).
func TestSentinelClientDialsOnce(t *testing.T) {
	for _, u := range []string{"redis-sentinel://127.0.0.1:1/m", "redis://127.0.0.1:1?master=m"} {
		c, err := NewClient(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		rc, ok := c.(*redis.Client)
		if !ok {
			t.Fatalf("%s: got %T", u, c)
		}
		if got := rc.Options().DialerRetries; got != 1 {
			t.Errorf("%s: DialerRetries = %d, want 1", u, got)
		}
		_ = c.Close()
	}
}

// A password holding an unescaped '#' or '?' after a ':' parses, in url.Parse, as a host that
// holds part of the password, which every later error and log line would quote: NewClient refuses
// it as malformed, naming no part of it.
func TestNewClientRefusesAPasswordReadAsTheHost(t *testing.T) {
	for u, secret := range map[string]string{
		"redis://:s3cr3tPart:#rest@127.0.0.1:6379":    "s3cr3tPart",
		"redis://u:Zqgc)jj:?eYb%/5Wv@127.0.0.1:1/x":   "Zqgc",
		"redis://u:pa:ss#word@127.0.0.1:6379":         "pa:ss",
		"rediss://:k3y:?tail@example.com:6380/0":      "k3y",
		"redis://user:one:two?three@127.0.0.1:6379/0": "one:two",
	} {
		c, err := NewClient(u)
		if err == nil {
			_ = c.Close()
			t.Errorf("NewClient(%q): no error; url.Parse reads the host as %q", u, hostOf(u))
			continue
		}
		if !strings.Contains(err.Error(), "is malformed") || strings.Contains(err.Error(), secret) {
			t.Errorf("NewClient(%q): %v; want it called malformed, without %q", u, err, secret)
		}
	}
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return err.Error()
	}
	return u.Host
}

// A sentinel that refuses connections fails a call at once with that refusal, within the default
// 50ms timeout: go-redis's master lookup retried it MaxRetries times (3 by default, with a backoff),
// so every call took 70–130ms and failed as the limiter's timeout instead.
func TestSentinelLookupFailsARefusalAtOnce(t *testing.T) {
	for _, u := range []string{"redis-sentinel://127.0.0.1:1/m", "redis://127.0.0.1:1?master=m"} {
		c, err := NewClient(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		l, err := New(c, "sen", policy.FixedWindow{Limit: 10, Window: time.Second}, WithOnFailure(FailClosed), WithOnError(func(error) {}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Take(context.Background(), "k", 1)
		_ = l.Close()
		_ = c.Close()
		if err == nil || !strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "no reply within") {
			t.Fatalf("%s: Take with every sentinel refusing: %v; want the refusal, not the timeout", u, err)
		}
	}
}
