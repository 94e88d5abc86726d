package redisstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// crc16 is the CRC-16/XMODEM that Redis Cluster hashes keys with (cluster spec, appendix A),
// written here from the spec so the test does not trust the code under test.
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc ^= uint16(b[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// hashedPart is the part of a key Redis Cluster hashes: the content of the first {...} when it is
// non-empty, else the whole key.
func hashedPart(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

var keyShape = regexp.MustCompile(`^sl:\{[0-9a-f]{16}\}api:0123abcd:`)

func TestKeyNames(t *testing.T) {
	long := strings.Repeat("x", MaxInlineSubject+1)
	key := func(name, s string) string { return keyFor("sl:", name, "0123abcd", shortSubject(s)) }
	subjects := []string{"", "user:42", "{", "}", "}{", "{a}", "a{b}c", "{}", "#abc", long, "ünïcode", "a\x00b"}
	seen := map[string]string{}
	for _, s := range subjects {
		k := key("api", s)
		if !keyShape.MatchString(k) {
			t.Errorf("key for %q = %q: not prefix{16 hex}name:policy:", s, k)
		}
		tag := k[4:20]
		if got := hashedPart(k); got != tag {
			t.Errorf("key for %q = %q: a cluster would hash %q, not the tag %q", s, k, got, tag)
		}
		if crc16(hashedPart(k))%16384 != crc16(tag)%16384 {
			t.Errorf("key for %q lands on another slot than its tag", s)
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("subjects %q and %q share key %q", prev, s, k)
		}
		seen[k] = s
	}
	if k := key("api", long); strings.Contains(k, long) || len(k) > 100 {
		t.Errorf("a long subject is kept verbatim: %q", k)
	}
	if k := key("api", "user:42"); !strings.HasSuffix(k, "}api:0123abcd:user:42") {
		t.Errorf("a short subject is not kept verbatim: %q", k)
	}
	// The same subject under two limiter names: two keys, on one slot (so that All can decide
	// them in one script on a cluster).
	if a, b := key("a", "x"), key("b", "x"); a == b || hashedPart(a) != hashedPart(b) {
		t.Errorf("two limiters' keys for one subject: %q and %q, want two keys with one tag", a, b)
	}
}

// TestKeysRecordThePolicy: every kind and every parameter changes the key, so that a limiter
// rebuilt with another policy under the same name never reads the old state as its own.
func TestKeysRecordThePolicy(t *testing.T) {
	ps := []policy.Policy{
		policy.SlidingCounter{Limit: 5, Window: time.Minute},
		policy.SlidingCounter{Limit: 6, Window: time.Minute},
		policy.SlidingCounter{Limit: 5, Window: time.Second},
		policy.FixedWindow{Limit: 5, Window: time.Minute},
		policy.TokenBucket{Rate: 5, Burst: 5},
		policy.TokenBucket{Rate: 5, Burst: 6},
		policy.GCRA{Rate: 5, Burst: 5},
		policy.GCRA{Rate: 6, Burst: 5},
	}
	seen := map[string]policy.Policy{}
	for _, p := range ps {
		l := mustNew(t, "api", p, WithClock(clock.NewManual(1_000_000)))
		k := l.Key("user:1")
		if prev, dup := seen[k]; dup {
			t.Errorf("%+v and %+v share key %q", prev, p, k)
		}
		seen[k] = p
	}
}

// TestPolicyChangeStartsAfresh: GCRA state, then a sliding counter under the same name. Read as
// a window's counts, the arrival time would refuse a fresh client for a minute; with the policy in
// the key name the sliding counter starts from nothing.
func TestPolicyChangeStartsAfresh(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(1_760_000_000_000)
	// Rate 3: the arrival time's remainder is not 0, and would read as a count.
	g := mustNew(t, "api", policy.GCRA{Rate: 3, Burst: 5}, WithClock(clk))
	for range 5 {
		if _, err := g.Take(ctx, "user", 1); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(newClient(t, testAddr), "api", policy.SlidingCounter{Limit: 5, Window: time.Minute}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// newClient flushed the server: write the GCRA state again, as the old fleet would have.
	for range 5 {
		if _, err := g.Take(ctx, "user", 1); err != nil {
			t.Fatal(err)
		}
	}
	d, err := s.Take(ctx, "user", 1)
	if err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("sliding counter after GCRA under the same name: %+v, %v; want admitted with 4 left", d, err)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	c := newClient(t, testAddr)
	noCtx := redis.NewClient(&redis.Options{Addr: testAddr})
	defer noCtx.Close()
	p := policy.SlidingCounter{Limit: 10, Window: time.Second}
	cases := []struct {
		name   string
		client redis.UniversalClient
		lname  string
		p      policy.Policy
		opts   []Option
		want   string
	}{
		{"nil client", nil, "n", p, nil, "client is nil"},
		{"empty name", c, "", p, nil, "name is empty"},
		{"brace in name", c, "a{b", p, nil, `name = "a{b"`},
		{"colon in name", c, "a:b", p, nil, `name = "a:b"`},
		{"nil policy", c, "n", nil, nil, "policy is nil"},
		{"nil pointer policy", c, "n", (*policy.GCRA)(nil), nil, "policy is nil"},
		{"pointer policy, invalid", c, "n", &policy.SlidingCounter{Limit: 0, Window: time.Second}, nil, "SlidingCounter.Limit = 0"},
		{"bad limit", c, "n", policy.SlidingCounter{Limit: 0, Window: time.Second}, nil, "SlidingCounter.Limit = 0"},
		{"bad window", c, "n", policy.SlidingCounter{Limit: 1, Window: 1500 * time.Microsecond}, nil, "SlidingCounter.Window = 1.5ms"},
		{"log limit", c, "n", policy.SlidingLog{Limit: policy.MaxLogLimit + 1, Window: time.Second}, nil, "SlidingLog.Limit = 10001"},
		{"timeout", c, "n", p, []Option{WithTimeout(0)}, "WithTimeout(0s)"},
		{"skew", c, "n", p, []Option{WithClockSkew(-time.Second)}, "WithClockSkew(-1s)"},
		{"breaker", c, "n", p, []Option{WithBreaker(0, time.Second)}, "threshold = 0"},
		{"cooldown", c, "n", p, []Option{WithBreaker(1, 0)}, "cooldown = 0s"},
		{"deny cache", c, "n", p, []Option{WithDenyCache(-1)}, "WithDenyCache(-1)"},
		{"prefix", c, "n", p, []Option{WithPrefix("a}")}, `prefix = "a}"`},
		{"fallback missing", c, "n", p, []Option{WithOnFailure(FailLocal)}, "WithOnFailure(FailLocal) needs WithFallback"},
		{"fallback nil", c, "n", p, []Option{WithFallback(nil)}, "WithFallback(nil)"},
		{"clock nil", c, "n", p, []Option{WithClock(nil)}, "WithClock(nil)"},
		{"no context deadlines", noCtx, "n", p, nil, "ContextTimeoutEnabled = false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(tc.client, tc.lname, tc.p, tc.opts...)
			if err == nil {
				_ = l.Close()
				t.Fatalf("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
		})
	}
	// Short read and write timeouts bound a call without context deadlines.
	short := redis.NewClient(&redis.Options{Addr: testAddr, ReadTimeout: 20 * time.Millisecond, WriteTimeout: 20 * time.Millisecond})
	defer short.Close()
	l, err := New(short, "n", p)
	if err != nil {
		t.Fatalf("New with short client timeouts: %v", err)
	}
	_ = l.Close()
}

// TestCluster runs a limiter on a real one-node Redis Cluster (all 16384 slots on one node)
// through a ClusterClient, with subjects full of braces: no CROSSSLOT, no MOVED loop, and the
// decisions count as on a single node.
func TestCluster(t *testing.T) {
	srv, err := redistest.Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if err != nil {
		t.Fatalf("start cluster node: %v", err)
	}
	defer srv.Stop()
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer admin.Close()
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, _ := admin.ClusterInfo(ctx).Result()
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ok after 5s: %s", info)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}, ContextTimeoutEnabled: true, DisableIdentity: true})
	defer cc.Close()
	l, err := New(cc, "api", policy.SlidingCounter{Limit: 3, Window: time.Minute}, WithClock(clock.NewManual(1_000_000)), WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, subject := range []string{"plain", "{a}", "}{", "x{y}z{w}", strings.Repeat("{", 300)} {
		for i := range 4 {
			d, err := l.Take(ctx, subject, 1)
			if err != nil {
				t.Fatalf("Take(%q) #%d on a cluster: %v", subject, i, err)
			}
			if want := i < 3; d.Allowed != want {
				t.Fatalf("Take(%q) #%d: allowed %v, want %v", subject, i, d.Allowed, want)
			}
		}
		slot, err := admin.ClusterKeySlot(ctx, l.Key(subject)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(crc16(hashedPart(l.Key(subject))) % 16384); slot != want {
			t.Fatalf("CLUSTER KEYSLOT %q = %d, want the tag's slot %d", l.Key(subject), slot, want)
		}
	}
}

// TestDenyCacheSavesRoundTrips counts, with a manual clock, what the deny cache saves on a
// blocked client: every refusal until the retry time is answered locally, with the same Decision
// Redis gives, and the first request after it goes to Redis again.
func TestDenyCacheSavesRoundTrips(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(1_760_000_000_000)
	p := policy.SlidingCounter{Limit: 10, Window: time.Second}
	cached := mustNew(t, "cached", p, WithClock(clk))
	plain := mustNew(t, "plain", p, WithClock(clk), WithDenyCache(0))
	for range 10 {
		for _, l := range []*Limiter{cached, plain} {
			if d, _ := l.Take(ctx, "abuser", 1); !d.Allowed {
				t.Fatal("refused within the limit")
			}
		}
	}
	base := statsOf(cached)
	const blocked = 1000
	var retry time.Duration
	for i := range blocked {
		clk.Set(1_760_000_000_000 + int64(i%900)) // the client keeps trying within the window
		a, errA := cached.Take(ctx, "abuser", 1)
		b, errB := plain.Take(ctx, "abuser", 1)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if a.Allowed || !sameDecision(a, b) {
			t.Fatalf("try %d: deny cache decided %+v, Redis %+v", i, a, b)
		}
		retry = a.RetryAfter
	}
	st := statsOf(cached)
	if trips := st.RoundTrips - base.RoundTrips; trips != 1 {
		t.Fatalf("%d round trips for %d refusals of a blocked key, want 1 (the first)", trips, blocked)
	}
	if hits := st.DenyCacheHits - base.DenyCacheHits; hits != blocked-1 {
		t.Fatalf("deny cache hits = %d, want %d", hits, blocked-1)
	}
	clk.Set(1_760_000_000_899 + retry.Milliseconds())
	if d, _ := cached.Take(ctx, "abuser", 1); !d.Allowed {
		t.Fatalf("refused at the retry time: %+v", d)
	}
	if trips := statsOf(cached).RoundTrips - st.RoundTrips; trips != 1 {
		t.Fatalf("the request at the retry time made %d round trips, want 1", trips)
	}
	t.Logf("blocked key: %d refusals, %d round trips with the deny cache, %d without", blocked, 1, blocked)
}

// TestDenyCacheMaxAge: another host's Reset does not reach this host's deny cache, which goes on
// refusing from the entry until its retry time (the end of an hourly window, 6m40s away here) without WithDenyCacheMaxAge, and
// for at most the max age with it: then it asks Redis, which admits.
func TestDenyCacheMaxAge(t *testing.T) {
	ctx := context.Background()
	const t0 = 1_760_000_000_000
	clk := clock.NewManual(t0)
	p := policy.FixedWindow{Limit: 2, Window: time.Hour}
	bounded := mustNew(t, "maxage", p, WithClock(clk), WithDenyCacheMaxAge(time.Second))
	unbounded := mustNew(t, "maxage", p, WithClock(clk))
	admin := mustNew(t, "maxage", p, WithClock(clk))
	take := func(l *Limiter) engine.Decision {
		t.Helper()
		d, err := l.Take(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	reset := func() {
		t.Helper()
		if err := admin.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []*Limiter{bounded, unbounded} {
		reset()
		for range 2 {
			if !take(l).Allowed {
				t.Fatal("refused within the limit")
			}
		}
		if d := take(l); d.Allowed || d.RetryAfter < time.Minute {
			t.Fatalf("the third in the window: %+v, want refused until the window ends, minutes away", d)
		}
	}
	reset() // the other host's
	clk.Set(t0 + 999)
	for _, l := range []*Limiter{bounded, unbounded} {
		trips := statsOf(l).RoundTrips
		if take(l).Allowed {
			t.Fatal("admitted within the max age: the entry should still answer")
		}
		if n := statsOf(l).RoundTrips - trips; n != 0 {
			t.Fatalf("%d round trips within the max age, want 0 (answered in process)", n)
		}
	}
	clk.Set(t0 + 1000)
	trips := statsOf(bounded).RoundTrips
	if d := take(bounded); !d.Allowed {
		t.Fatalf("past the max age, with the key reset on Redis: %+v, want admitted", d)
	}
	if n := statsOf(bounded).RoundTrips - trips; n != 1 {
		t.Fatalf("%d round trips past the max age, want 1", n)
	}
	if take(unbounded).Allowed {
		t.Fatal("without a max age the entry refuses until its retry time; it admitted")
	}

	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "redisstore: WithDenyCacheMaxAge(-1s): must be 0 (until the retry time) or at least 1ms"},
		{time.Microsecond, "redisstore: WithDenyCacheMaxAge(1µs): must be 0 (until the retry time) or at least 1ms"},
	} {
		if _, err := New(newClient(t, testAddr), "maxage", p, WithDenyCacheMaxAge(c.d)); err == nil || err.Error() != c.want {
			t.Fatalf("WithDenyCacheMaxAge(%v): %v, want %q", c.d, err, c.want)
		}
	}
}

func TestWithServerTime(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, testAddr)
	l, err := New(c, "srvtime", policy.FixedWindow{Limit: 2, Window: time.Hour}, WithServerTime())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		d, err := l.Take(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; d.Allowed != want {
			t.Fatalf("take %d: allowed %v", i, d.Allowed)
		}
		// The window is the server's hour, whatever this host's clock says.
		if end := now.Truncate(time.Hour).Add(time.Hour); !d.ResetAt.Equal(end) && !d.ResetAt.Equal(end.Add(time.Hour)) {
			t.Fatalf("ResetAt %v, want the end of the server's hour %v", d.ResetAt, end)
		}
	}
	if st := statsOf(l); st.DenyCacheHits != 1 {
		t.Fatalf("deny cache hits with server time = %d, want 1 (the last refusal)", st.DenyCacheHits)
	}
}

func TestNegativeZeroAndClosed(t *testing.T) {
	ctx := context.Background()
	l := mustNew(t, "misc", policy.SlidingCounter{Limit: 2, Window: time.Second}, WithClock(clock.NewManual(5_000)))
	d, err := l.Take(ctx, "k", -1)
	if err != nil || d.Allowed || d.Reason.String() != "negative cost" {
		t.Fatalf("negative cost: %+v, %v", d, err)
	}
	if d, _ := l.Take(ctx, "k", 0); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("cost 0: %+v", d)
	}
	if d, _ := l.Take(ctx, "k", 1<<62); d.Allowed || d.Reason.String() != "cost above limit" || d.Remaining != 2 {
		t.Fatalf("huge cost: %+v", d)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	if d, err := l.Take(ctx, "k", 1); err != ErrClosed || d.Reason.String() != "limiter closed" {
		t.Fatalf("after Close: %+v, %v", d, err)
	}
	if l.Name() != "misc" || fmt.Sprint(l.Policy()) != fmt.Sprint(policy.SlidingCounter{Limit: 2, Window: time.Second}) {
		t.Fatalf("Name/Policy: %q %v", l.Name(), l.Policy())
	}
}

// TestKeyErrorKeepsBreakerClosed: a key holding something else (another application's list)
// fails that key's calls with the failure choice, but the server answered, so other keys keep
// being decided by Redis.
func TestKeyErrorKeepsBreakerClosed(t *testing.T) {
	ctx := context.Background()
	l := mustNew(t, "wrong", policy.SlidingCounter{Limit: 5, Window: time.Second}, WithOnFailure(FailClosed))
	c := newClient(t, testAddr)
	if err := c.LPush(ctx, l.Key("victim"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	d, err := l.Take(ctx, "victim", 1)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") || d.Allowed {
		t.Fatalf("Take on a list key: %+v, %v", d, err)
	}
	// The key is named without its subject, the caller's key, which may be an API key.
	named := strings.TrimSuffix(l.Key("victim"), "victim") + "…"
	if !strings.Contains(err.Error(), named) || strings.Contains(err.Error(), "victim") {
		t.Errorf("Take on a list key: %v; want the key named as %s, without the subject", err, named)
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		t.Errorf("Take on a list key: %v does not wrap the server's reply", err)
	}

	// A value the scripts cannot read (another application's string): their own error quotes
	// the key, and the subject is hidden there too.
	if err := c.Set(ctx, l.Key("other-victim"), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = l.Take(ctx, "other-victim", 1)
	if err == nil || strings.Contains(err.Error(), "other-victim") {
		t.Errorf("Take on a key holding another value: %v; want an error without the subject", err)
	}
	// Subjects Redis rewrites in its reply: a line break becomes a space, trailing ones go, and a
	// NUL ends the text.
	for _, subject := range []string{"SECRET\r\nx", "\r\nSECRET\r\n", "SECRET\x00tail"} {
		if err := c.Set(ctx, l.Key(subject), "garbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err = l.Take(ctx, subject, 1); err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("Take on key %q holding another value: %v; want an error without the subject", subject, err)
		}
	}
	if d, err := l.Take(ctx, "other", 1); err != nil || !d.Allowed {
		t.Fatalf("another key after the error: %+v, %v (breaker open: %v)", d, err, statsOf(l).BreakerOpen)
	}
}

// statsOf returns l's counters as a value, for comparisons in tests.
func statsOf(l *Limiter) Stats {
	var s Stats
	l.Stats(&s)
	return s
}
