package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/redisstore/internal/check"
)

// DiscoveryTimeout bounds the one round trip NewClient makes to learn whether a server is a
// cluster node. A constant, safe to read from anywhere.
const DiscoveryTimeout = 2 * time.Second

// NewClient returns a go-redis client for rawURL, set up as a Limiter needs it (context deadlines
// bound every call), for one of these forms:
//
//	redis://[user[:password]@]host[:port][/db][?option=value...]    plain TCP (port 6379 by default)
//	rediss://[user[:password]@]host[:port][/db][?option=value...]   TLS
//	unix://[user[:password]@]/path/to/socket[?db=N]                 Unix socket
//	redis-sentinel://[user[:password]@]host:port[,host:port...]/master[/db][?sentinel_password=...]
//	redis://[user[:password]@]host:port[/db]?master=name            the same, sentinel at host:port
//
// The options of the redis://, rediss:// and unix:// forms are go-redis's URL options
// (dial_timeout=3s, pool_size=20, ...), all of which a cluster client (below) keeps too, except
// that a dial_timeout or pool_timeout of 0 or less is refused (go-redis reads it as none, which
// fails every dial, or every wait for a connection, at once). The sentinel forms have no TLS:
// rediss:// with master= is refused, as are negative timeouts. A sentinel URL, in either form, takes only db,
// dial_timeout, read_timeout, write_timeout, pool_timeout, pool_size, sentinel_username and
// sentinel_password; its user and password are the master's, and sentinel_username and
// sentinel_password are the sentinels' own. A redis:// or rediss:// URL that names one node of a
// Redis Cluster is discovered (INFO cluster, one round trip bounded by DiscoveryTimeout) and gets a
// *redis.ClusterClient seeded with that node, so that every key works; such a URL naming a database
// other than 0 is refused, as a cluster has only database 0. Otherwise the result is a
// *redis.Client. When the server cannot be reached at all, NewClient still returns the single-node
// client (a proxy may start before its Redis does); if the server later turns out to be a cluster
// node, its MOVED replies open the Limiter's breaker and are reported as ErrMisconfigured, naming
// the cluster. A server that refuses the password at discovery makes NewClient fail.
//
// A call dials once, not go-redis's five attempts 100ms apart (the URL's dialer_retries sets it
// for a cluster), so that a Redis refusing connections fails a call at once with that refusal, to
// be decided by the failure choice, rather than after the call's timeout; the next call dials
// again. That holds for the sentinel forms too. A cluster client reloads the cluster's map every
// 2 seconds, so that after a failover the promoted replica's slots are found within about that:
// the limiters' scripts are not retried, so a dead master's errors never trigger go-redis's own
// reload, and its periodic one comes every 60 seconds.
//
// No error NewClient returns contains the password, whatever rawURL looks like: errors quote the
// URL as RedactURL prints it, and any other piece of it (a port, a database, an option) as it is
// where that URL shows it in clear, or else with the password hidden where it stands as a word
// there; their own text is never altered, so a password that is one of its words, or equal to a
// piece the URL shows, cannot be told by a gap. (A user name or host that equals the password is
// printed as it is: it is not the password's text.) A password must be percent-encoded where it holds '#', '?', '/' or
// '@': one that ends the URL's authority early, so that part of it would be read as the host (and
// quoted by every later error), is refused as malformed. The caller closes the client. NewClient is safe for concurrent use.
func NewClient(rawURL string) (c redis.UniversalClient, err error) {
	defer func() {
		// go-redis panics on some options it parses without checking (checkPool refuses the
		// ones known); a bad URL must be an error, not a crash.
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("redisstore: Redis URL %q: the go-redis client refused its options: %s", RedactURL(rawURL), quotedPieces(fmt.Sprint(r), rawURL))
		}
	}()
	// The errors are written with every piece of rawURL they quote passed through piece, and
	// never scrubbed whole: their own text stays readable, and a password that is one of its words
	// cannot be told by where it was hidden.
	c, err = clientFor(rawURL)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func clientFor(rawURL string) (redis.UniversalClient, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redisstore: Redis URL %q has no scheme: want redis://, rediss://, unix:// or redis-sentinel://", RedactURL(rawURL))
	}
	switch scheme {
	case "redis-sentinel":
		return newSentinelClient(rawURL)
	case "redis", "rediss", "unix":
	default:
		return nil, fmt.Errorf("redisstore: Redis URL %q: unknown scheme %q: want redis://, rediss://, unix:// or redis-sentinel://", RedactURL(rawURL), scheme)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL; its inner error only says what is wrong.
		// A password holding a delimiter may be split across its parts: then say no more.
		var ue *url.Error
		if errors.As(err, &ue) && !mentionsSecret(ue.Err.Error(), rawURL) && !inPassword(ue.Err, rawURL) {
			return nil, fmt.Errorf("redisstore: Redis URL %q is malformed: %v", RedactURL(rawURL), ue.Err)
		}
		return nil, fmt.Errorf("redisstore: Redis URL %q is malformed", RedactURL(rawURL))
	}
	if u.User == nil && redactUserinfo(rawURL) != rawURL || !strings.HasPrefix(u.Host, "[") && strings.Count(u.Host, ":") > 1 {
		// A password holding an unescaped '#', '?' or '/' ends the authority early, and url.Parse
		// then reads part of it as the host, which every error and log line would quote.
		return nil, fmt.Errorf("redisstore: Redis URL %q is malformed: percent-encode a password's '#', '?', '/' and '@' (%%23, %%3F, %%2F, %%40)", RedactURL(rawURL))
	}
	q := u.Query()
	if m := firstNonEmpty(q.Get("master"), q.Get("master_name")); m != "" && scheme != "unix" {
		if scheme == "rediss" {
			// The sentinel form has no TLS: a URL that asks for it must not go in clear.
			return nil, fmt.Errorf("redisstore: Redis URL %q: sentinel over TLS (rediss:// with master=) is not supported; build a redis.FailoverClient with TLSConfig and pass it to New", RedactURL(rawURL))
		}
		s := "redis-sentinel://" + userinfo(u) + u.Host + "/" + url.PathEscape(m)
		if db := strings.Trim(u.Path, "/"); db != "" {
			s += "/" + db
		}
		return newSentinelClient(s + sentinelQuery(q))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("redisstore: Redis URL %q: port %q is not in [1, 65535]", RedactURL(rawURL), piece(p, rawURL))
		}
	}
	if db := strings.Trim(u.Path, "/"); scheme != "unix" && strings.HasPrefix(db, "-") {
		// go-redis reads a negative database as 0, so the URL's own number would be ignored.
		return nil, fmt.Errorf("redisstore: Redis URL %q: database %q is negative", RedactURL(rawURL), piece(db, rawURL))
	}
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisstore: Redis URL %q: %s", RedactURL(rawURL), quotedPieces(err.Error(), rawURL))
	}
	if o.DB < 0 {
		return nil, fmt.Errorf("redisstore: Redis URL %q: database %d is negative", RedactURL(rawURL), o.DB)
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"dial_timeout", o.DialTimeout}, {"pool_timeout", o.PoolTimeout}} {
		if t.d < 0 {
			v := q[t.name][len(q[t.name])-1] // the last, which go-redis reads
			return nil, fmt.Errorf("redisstore: Redis URL %q: %s = %q: must be positive (go-redis reads 0 or less as no timeout, and then fails at once)", RedactURL(rawURL), t.name, piece(v, rawURL))
		}
	}
	if err := checkOptions(o); err != nil {
		return nil, fmt.Errorf("redisstore: Redis URL %q: %s", RedactURL(rawURL), quotedPieces(err.Error(), rawURL))
	}
	o.ContextTimeoutEnabled = true
	if o.DialerRetries == 0 {
		// One attempt: go-redis makes 5, 100ms apart, far past a limiter's deadline
		// (50ms by default), so a Redis that refuses connections took each call's whole timeout
		// to fail, and a caller with a shorter deadline of its own never saw the failure choice.
		o.DialerRetries = 1
	}
	if scheme == "unix" {
		return redis.NewClient(o), nil
	}
	cluster, err := isClusterNode(o)
	if err != nil {
		return nil, fmt.Errorf("redisstore: Redis URL %q: %w", RedactURL(rawURL), err)
	}
	if !cluster {
		return redis.NewClient(o), nil
	}
	if o.DB != 0 {
		return nil, fmt.Errorf("redisstore: Redis URL %q names database %d, but %s is a Redis Cluster node, and a cluster has only database 0", RedactURL(rawURL), o.DB, piece(o.Addr, rawURL))
	}
	// Every option the URL set: it named one node, and the client is for that node's cluster.
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                   []string{o.Addr},
		Username:                o.Username,
		Password:                o.Password,
		TLSConfig:               o.TLSConfig,
		ClientName:              o.ClientName,
		Protocol:                o.Protocol,
		DialTimeout:             o.DialTimeout,
		ReadTimeout:             o.ReadTimeout,
		WriteTimeout:            o.WriteTimeout,
		PoolFIFO:                o.PoolFIFO,
		PoolSize:                o.PoolSize,
		PoolTimeout:             o.PoolTimeout,
		MinIdleConns:            o.MinIdleConns,
		MaxIdleConns:            o.MaxIdleConns,
		MaxActiveConns:          o.MaxActiveConns,
		MaxConcurrentDials:      o.MaxConcurrentDials,
		DialerRetries:           o.DialerRetries,
		ConnMaxIdleTime:         o.ConnMaxIdleTime,
		ConnMaxLifetime:         o.ConnMaxLifetime,
		ConnMaxLifetimeJitter:   o.ConnMaxLifetimeJitter,
		MaxRetries:              o.MaxRetries,
		MinRetryBackoff:         o.MinRetryBackoff,
		MaxRetryBackoff:         o.MaxRetryBackoff,
		PipelinePoolSize:        o.PipelinePoolSize,
		PipelineReadBufferSize:  o.PipelineReadBufferSize,
		PipelineWriteBufferSize: o.PipelineWriteBufferSize,
		ContextTimeoutEnabled:   true,
		DisableIdentity:         o.DisableIdentity,
		// The limiters' scripts are not retried (a retry would count twice), and so a dead
		// master's connection errors never make go-redis reload the cluster's map: a promoted
		// replica's slots kept going to the dead node until the periodic reload, 60s by default.
		ClusterStateReloadInterval: clusterReload,
	}), nil
}

// clusterReload is how often a cluster client from NewClient reloads the cluster's map (one
// CLUSTER SLOTS): after a failover, calls for the failed master's slots fail for about this long.
const clusterReload = 2 * time.Second

// checkOptions refuses the connection-pool sizes that go-redis would panic on rather than refuse
// (a negative pool_size makes a channel of negative size), and a client_name the server refuses
// on every new connection (each call would then dial again and fail), naming the option and its
// value.
func checkOptions(o *redis.Options) error {
	if strings.ContainsFunc(o.ClientName, func(r rune) bool { return r < '!' || r > '~' }) {
		return fmt.Errorf("client_name = %q: Redis takes only printable ASCII characters, and no space", o.ClientName)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"pool_size", o.PoolSize}, {"min_idle_conns", o.MinIdleConns}, {"max_idle_conns", o.MaxIdleConns},
		{"max_active_conns", o.MaxActiveConns}, {"max_concurrent_dials", o.MaxConcurrentDials},
	} {
		if f.v < 0 || f.v > math.MaxInt32 {
			return fmt.Errorf("%s = %d is not in [0, %d]", f.name, f.v, math.MaxInt32)
		}
	}
	return nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func userinfo(u *url.URL) string {
	if u.User == nil {
		return ""
	}
	return u.User.String() + "@"
}

// sentinelQuery keeps the options a sentinel URL understands, minus the master's name.
func sentinelQuery(q url.Values) string {
	q = cloneValues(q)
	q.Del("master")
	q.Del("master_name")
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// isClusterNode asks the server whether it runs in cluster mode. Unreachable counts as not (see
// NewClient); an error reply that every call would get (a wrong password) is returned.
func isClusterNode(o *redis.Options) (bool, error) {
	probe := *o
	// One connection is enough, but a pool of one starts a goroutine that redials every second
	// after its first failed dial (go-redis's pool does so once the failures reach the pool
	// size), which would outlive NewClient on an unreachable server by up to a second.
	probe.PoolSize, probe.MinIdleConns, probe.MaxRetries, probe.DialerRetries = 2, 0, -1, 1
	// A cluster node refuses SELECT: ask on database 0, and judge the URL's database after.
	probe.DB = 0
	probe.DisableIdentity = true
	c := redis.NewClient(&probe)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), DiscoveryTimeout)
	defer cancel()
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil {
		if check.EveryKey(err, false) != "" {
			return false, fmt.Errorf("%s: %w", check.EveryKey(err, false), err)
		}
		return false, nil
	}
	return strings.Contains(info, "cluster_enabled:1"), nil
}

// newSentinelClient parses redis-sentinel://[user[:password]@]host:port[,host:port...]/master[/db]
// by hand: a list of hosts is not a URL authority that net/url accepts.
func newSentinelClient(rawURL string) (redis.UniversalClient, error) {
	bad := func(why string) error {
		return fmt.Errorf("redisstore: sentinel URL %q: %s (want %s)", RedactURL(rawURL), why, sentinelForm)
	}
	rest := strings.TrimPrefix(rawURL, "redis-sentinel://")
	rest, rawQuery, _ := strings.Cut(rest, "?")
	// A '@' past the first '?' may end a password that holds that '?' unescaped: then what is read
	// below as hosts, ports and a database may be pieces of the password, and an error about them
	// says only that the URL is malformed. piece is the part of the URL that why is about.
	badPart := func(why, piece string) error {
		if strings.Contains(rawQuery, "@") || !public(piece, rawURL) && mentionsSecret(piece, rawURL) {
			return fmt.Errorf("redisstore: sentinel URL %q is malformed: percent-encode a password's '#', '?', '/' and '@' (%%23, %%3F, %%2F, %%40)", RedactURL(rawURL))
		}
		return bad(why)
	}
	// One dial, as for a single node (see NewClient): go-redis's five, 100ms apart, made every call
	// during a failover wait out its whole deadline before the failure choice decided it.
	// MaxRetries -1 for the same reason: go-redis's master lookup retries a sentinel that refuses
	// connections MaxRetries times with a backoff, and the sentinels' client copies it.
	o := &redis.FailoverOptions{ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		ui := rest[:at]
		rest = rest[at+1:]
		user, pass, _ := strings.Cut(ui, ":")
		var err error
		if o.Username, err = url.PathUnescape(user); err != nil {
			return nil, bad("the user name is not URL-escaped")
		}
		if o.Password, err = url.PathUnescape(pass); err != nil {
			return nil, bad("the password is not URL-escaped")
		}
	}
	hosts, path, _ := strings.Cut(rest, "/")
	for h := range strings.SplitSeq(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return nil, badPart(fmt.Sprintf("sentinel address %q is not host:port", piece(h, rawURL)), h)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, badPart(fmt.Sprintf("sentinel port %q is not in [1, 65535]", piece(port, rawURL)), port)
		}
		o.SentinelAddrs = append(o.SentinelAddrs, h)
	}
	master, db, _ := strings.Cut(path, "/")
	var err error
	if o.MasterName, err = url.PathUnescape(master); err != nil || o.MasterName == "" {
		return nil, badPart("no master name", master)
	}
	if db != "" {
		if o.DB, err = strconv.Atoi(db); err != nil || o.DB < 0 {
			return nil, badPart(fmt.Sprintf("database %q is not a number", piece(db, rawURL)), db)
		}
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, bad("the query is malformed")
	}
	for k, v := range q {
		val := v[len(v)-1]
		switch k {
		case "sentinel_username":
			o.SentinelUsername = val
		case "sentinel_password":
			o.SentinelPassword = val
		case "db":
			if o.DB, err = strconv.Atoi(val); err != nil || o.DB < 0 {
				return nil, bad(fmt.Sprintf("db = %q is not a number", piece(val, rawURL)))
			}
		case "dial_timeout", "read_timeout", "write_timeout", "pool_timeout":
			d, err := time.ParseDuration(val)
			if err != nil {
				return nil, bad(fmt.Sprintf("%s = %q is not a duration", k, piece(val, rawURL)))
			}
			if d < 0 {
				// go-redis sets no socket deadline at all for most negative timeouts, the
				// context's included, so a call could outlast its deadline.
				return nil, bad(fmt.Sprintf("%s = %q is negative", k, piece(val, rawURL)))
			}
			switch k {
			case "dial_timeout":
				o.DialTimeout = d
			case "read_timeout":
				o.ReadTimeout = d
			case "write_timeout":
				o.WriteTimeout = d
			default:
				o.PoolTimeout = d
			}
		case "pool_size":
			if o.PoolSize, err = strconv.Atoi(val); err != nil || o.PoolSize < 1 || o.PoolSize > math.MaxInt32 {
				return nil, bad(fmt.Sprintf("pool_size = %q is not a number in [1, %d]", piece(val, rawURL), math.MaxInt32))
			}
		default:
			return nil, bad(fmt.Sprintf("unknown option %q (known: sentinel_username, sentinel_password, db, dial_timeout, read_timeout, write_timeout, pool_timeout, pool_size)", piece(k, rawURL)))
		}
	}
	return redis.NewFailoverClient(o), nil
}

// optionName is the name=, as written, percent escapes included, that may start an option. A name
// holds none of a URL's other delimiters, so that a path segment ("/reset-password=1") is not
// taken for one.
var optionName = regexp.MustCompile(`^([^&;#=?/:@]+)=`)

// secretOptions returns where the values of s's password options lie: those whose name, its
// percent escapes decoded as the query's parser decodes them, ends in "password" in any case (a
// name matched as written only, "sentinel_pass%77ord=", was taken as the sentinel password and
// printed in clear). A value runs to the next '&': a ';' or '#' in it may still be the password's,
// as a sentinel URL's parser reads it. Each '?', '&' and ';' is tried as an option's start, not
// only those a previous value left: run to the next '&', the value of "db=1" in
// "db=1;sentinel_password=x" swallowed the password option after it. The spans may overlap.
func secretOptions(s string) [][2]int {
	var out [][2]int
	for i := 0; i < len(s); i++ {
		start := i + 1
		if i == 0 && !strings.ContainsRune("?&;", rune(s[0])) {
			start = 0 // a bare query, "password=x"
		} else if !strings.ContainsRune("?&;", rune(s[i])) {
			continue
		}
		m := optionName.FindStringSubmatchIndex(s[start:])
		if m == nil {
			continue
		}
		if name, err := url.QueryUnescape(s[start+m[2] : start+m[3]]); err != nil || !strings.HasSuffix(squeeze(name), "password") {
			continue
		}
		end := len(s)
		if j := strings.IndexByte(s[start+m[1]:], '&'); j >= 0 {
			end = start + m[1] + j
		}
		out = append(out, [2]int{start + m[1], end})
	}
	return out
}

// squeeze lowers name and drops its spaces, '-' and '_', so that "Sentinel-Password" and
// "sentinel+password" (a space, decoded) read as the password options they mean.
func squeeze(name string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '-' || r == '_' {
			return -1
		}
		return unicode.ToLower(r)
	}, name)
}

// RedactURL returns rawURL with its password, and any password=... option (its name spelled with
// percent escapes or not), replaced by "xxxxx", for logs and error messages. It works on malformed
// URLs too (it does not need rawURL to parse), so a typo in a URL never prints the password. A
// pure function, safe for concurrent use.
func RedactURL(rawURL string) string {
	s := redactUserinfo(rawURL)
	var b strings.Builder
	at := 0                               // s[:at] is written
	for _, sp := range secretOptions(s) { // in order of their starts; a span within the last is done
		if sp[1] <= at {
			continue
		}
		b.WriteString(s[at:max(sp[0], at)])
		b.WriteString("xxxxx")
		at = sp[1]
	}
	b.WriteString(s[at:])
	return b.String()
}

// redactUserinfo is RedactURL without the password=... options: the password of the user
// information alone replaced.
func redactUserinfo(rawURL string) string {
	s := rawURL
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	}
	// The user information ends at the last '@' of the authority; a password may itself hold '/',
	// '?' or '@' unescaped, so take the last '@' before the query, or in the whole string.
	end := len(s)
	if q := strings.LastIndex(s, "?"); q >= start {
		if strings.LastIndex(s[start:q], "@") >= 0 {
			end = q
		}
	}
	if at := strings.LastIndex(s[start:end], "@"); at >= 0 {
		ui := s[start : start+at]
		if user, _, ok := strings.Cut(ui, ":"); ok {
			s = s[:start] + user + ":xxxxx" + s[start+at:]
		}
	}
	return s
}

// piece returns p, a piece of rawURL that an error is about to quote (a port, a database, an
// option's name or value, a host), as the error may print it: unchanged where RedactURL prints it
// in clear, as a piece of its own between delimiters, since it then tells nothing the quoted URL
// does not (hidden there, a password equal to the port was given away by the gap beside the
// URL's "...:99999/0"); otherwise scrubbed (see scrub), for a piece cut from inside a password that
// holds a delimiter.
func piece(p, rawURL string) string {
	if public(p, rawURL) {
		return p
	}
	return scrub(p, rawURL)
}

// public reports whether RedactURL prints p, a piece of rawURL, in clear as a piece of its own,
// as it is or escaped (a query's value is quoted unescaped).
func public(p, rawURL string) bool {
	if p == "" {
		return false
	}
	red := RedactURL(rawURL)
	if standsIn(red, p) {
		return true
	}
	// The URL may spell the piece with other escapes than an encoder would ("h%75nter2").
	for _, tok := range strings.FieldsFunc(red, isURLDelim) {
		if u, err := url.QueryUnescape(tok); err == nil && u == p {
			return true
		}
		if u, err := url.PathUnescape(tok); err == nil && u == p {
			return true
		}
	}
	return false
}

// standsIn reports whether p occurs in s with a URL delimiter, or the string's end, on each side.
func standsIn(s, p string) bool {
	for i := 0; i+len(p) <= len(s); {
		j := strings.Index(s[i:], p)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(p)
		if (j == 0 || isURLDelim(rune(s[j-1]))) && (end == len(s) || isURLDelim(rune(s[end]))) {
			return true
		}
		i = j + 1
	}
	return false
}

// quotedPieces returns msg, a message of go-redis, strconv or time about rawURL, with each piece
// of the URL it quotes passed through piece: the double-quoted strings, and the list after
// "unexpected option: ", which go-redis does not quote. The rest is the message's own text, never
// altered: "invalid syntax" hidden as "xxxxx syntax" gave away a password "invalid".
func quotedPieces(msg, rawURL string) string {
	const opts = "unexpected option: "
	if i := strings.Index(msg, opts); i >= 0 {
		names := strings.Split(msg[i+len(opts):], ", ")
		for j, n := range names {
			names[j] = piece(n, rawURL)
		}
		return quotedPieces(msg[:i], rawURL) + opts + strings.Join(names, ", ")
	}
	var out strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			out.WriteString(msg)
			return out.String()
		}
		j := i + 1 // the closing quote, past any escaped one
		for j < len(msg) && msg[j] != '"' {
			if msg[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(msg) { // no closing quote: the rest may be anything
			out.WriteString(msg[:i+1])
			out.WriteString(scrub(msg[i+1:], rawURL))
			return out.String()
		}
		q := msg[i+1 : j]
		if u, err := strconv.Unquote(`"` + q + `"`); err == nil && piece(u, rawURL) == u {
			out.WriteString(msg[:j+1])
		} else {
			out.WriteString(msg[:i+1])
			out.WriteString(scrub(q, rawURL))
			out.WriteByte('"')
		}
		msg = msg[j+1:]
	}
}

// scrub returns piece, a part of rawURL or a message quoting one that an error is about to quote,
// with every form of rawURL's password, and each piece of four bytes or more of one that holds a
// delimiter, replaced where it stands as a word (see replaceWord), except within the texts own.
func scrub(piece, rawURL string, own ...string) string {
	for _, p := range passwords(rawURL) {
		piece = replaceWord(piece, p, own)
		// A parser may quote a piece of a password that holds a delimiter.
		for _, f := range strings.FieldsFunc(p, isURLDelim) {
			if len(f) >= 4 {
				piece = replaceWord(piece, f, own)
			}
		}
	}
	return piece
}

// RedactText returns s, a message that may quote rawURL or pieces of it, with every copy of rawURL
// written as RedactURL writes it and every form of its password hidden, for errors and logs. A
// password is replaced where it stands as a word of its own, not inside a longer one, and not
// within the fixed text that starts redisstore's and go-redis's messages or within the redacted
// URL: a password "o" or "redis" replaced everywhere turned "redisstore: Redis URL" into
// "rxxxxxdisstxxxxxre" or "xxxxx: Redis URL", which gave it away. A parser quotes a piece of a
// URL whole, cut at its delimiters, so a password or a piece of one that it quotes stands as a
// word. RedactText cannot tell a message's own words from what it quotes: a password that is
// also one of those words ("password", "invalid") is hidden there too, where a reader may guess
// it. A pure function, safe for concurrent use.
func RedactText(s, rawURL string) string {
	if rawURL == "" {
		return s
	}
	red := RedactURL(rawURL)
	s = strings.ReplaceAll(s, rawURL, red)
	own := append(ownText[:len(ownText):len(ownText)], red) // the URL as RedactURL prints it holds no secret
	return scrub(s, rawURL, own...)
}

// ownText is fixed text of redisstore's and go-redis's messages: what lies within it did not come
// from the URL.
var ownText = []string{"redisstore: Redis URL ", "redisstore: sentinel URL ", "redis: ", sentinelForm}

// sentinelForm is how a sentinel URL is written, for its errors.
const sentinelForm = "redis-sentinel://[user[:password]@]host:port[,host:port...]/master[/db]"

// replaceWord replaces w in s with "xxxxx" wherever it is not part of a longer word (no letter or
// digit joins it on a side where w itself ends in one) and does not lie within one of the texts
// own.
func replaceWord(s, w string, texts []string) string {
	var own [][2]int // the spans of texts in s
	for _, t := range texts {
		for i := 0; ; {
			j := strings.Index(s[i:], t)
			if j < 0 {
				break
			}
			own = append(own, [2]int{i + j, i + j + len(t)})
			i += j + len(t)
		}
	}
	var out strings.Builder
	at := 0 // where the rest, s[at:], starts
	for {
		i := strings.Index(s[at:], w)
		if i < 0 {
			out.WriteString(s[at:])
			return out.String()
		}
		i += at
		end := i + len(w)
		keep := i > 0 && isWordByte(w[0]) && isWordByte(s[i-1]) ||
			end < len(s) && isWordByte(w[len(w)-1]) && isWordByte(s[end])
		for _, o := range own {
			keep = keep || o[0] <= i && end <= o[1]
		}
		if keep {
			out.WriteString(s[at : i+1])
			at = i + 1
			continue
		}
		out.WriteString(s[at:i])
		out.WriteString("xxxxx")
		at = end
	}
}

func isWordByte(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= 0x80
}

// inPassword reports whether err is an invalid escape that lies in rawURL's password ("%g1" in
// "secret%g1"), which url.Parse's error quotes.
func inPassword(err error, rawURL string) bool {
	var ee url.EscapeError
	if !errors.As(err, &ee) {
		return false
	}
	for _, p := range passwords(rawURL) {
		if strings.Contains(p, string(ee)) {
			return true
		}
	}
	return false
}

// mentionsSecret reports whether msg holds any piece (two bytes or more) of rawURL's password
// split at the characters that delimit a URL's parts.
func mentionsSecret(msg, rawURL string) bool {
	for _, p := range passwords(rawURL) {
		for _, f := range strings.FieldsFunc(p, isURLDelim) {
			if len(f) >= 2 && strings.Contains(msg, f) {
				return true
			}
		}
	}
	return false
}

// The ',' separates a sentinel URL's hosts.
func isURLDelim(r rune) bool { return strings.ContainsRune(":/?#[]@&=;,", r) }

// passwords returns what in rawURL could be a password, raw and unescaped.
func passwords(rawURL string) []string {
	var out []string
	add := func(p string) {
		if p == "" || p == "xxxxx" {
			return
		}
		out = append(out, p)
		if u, err := url.PathUnescape(p); err == nil && u != p {
			out = append(out, u)
		}
		if u, err := url.QueryUnescape(p); err == nil && u != p {
			out = append(out, u)
		}
	}
	// Whatever redactUserinfo replaced is a secret: find it by aligning the two strings. (Aligned
	// with RedactURL's, a password and a password= option would make one span of all between.)
	red := redactUserinfo(rawURL)
	i := 0
	for i < len(red) && i < len(rawURL) && red[i] == rawURL[i] {
		i++
	}
	if i < len(rawURL) {
		j, k := len(rawURL), len(red)
		for j > i && k > i && rawURL[j-1] == red[k-1] {
			j--
			k--
		}
		add(rawURL[i:j])
	}
	for _, sp := range secretOptions(rawURL) {
		add(rawURL[sp[0]:sp[1]])
	}
	return out
}
