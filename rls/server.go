package rls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Server answers envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit from a Config. It
// is safe for concurrent use: any number of calls may run while Reload swaps the config, and
// each call sees one config from start to end. Close releases every limiter; a closed Server
// answers UNAVAILABLE.
type Server struct {
	// UnimplementedRateLimitServiceServer answers Unimplemented for any method of the service
	// that a later version of its definition adds, as gRPC's generated code asks of a server.
	rlsv3.UnimplementedRateLimitServiceServer

	backend Backend
	headers bool
	now     func() time.Time
	logger  *log.Logger
	metrics *metrics
	health  *health.Server

	nextLog, unlogged atomic.Int64 // logBackendError's pace

	maxDetailed  int         // WithMaxDetailedSeries
	detailedFull atomic.Bool // the cap on detailed_metric series has been logged
	detailedLong atomic.Bool // a detailed_metric value past MaxDetailedValueBytes has been logged

	// mu guards st only for the moment a call takes it and joins its calls: a call holds no lock
	// while it decides (on Redis, round trips), so that a Reload waiting for mu cannot hold up
	// the calls that arrive behind it (an RWMutex with a writer waiting admits no new reader).
	mu     sync.RWMutex
	st     *state     // nil once closed
	reload sync.Mutex // one Reload at a time

	// serving holds the gRPC servers of the Serve calls in progress, for StopServing.
	servingMu sync.Mutex
	serving   map[*grpc.Server]bool
}

// state is one config with its limiters.
type state struct {
	cfg      *Config
	limiters map[string]*live // by limiter name
	byNode   map[*node]*live
	series   map[*node]*series // resolved metrics of each limited descriptor
	// calls counts the calls deciding on this state: its removed limiters are closed once a
	// Reload has replaced it and they are done. Added to only while the state is s.st, under mu.
	calls sync.WaitGroup
}

// live is the limiter of one rate limit, with what its statuses report.
type live struct {
	name   string
	domain string
	lim    slidelimit.Limiter // nil for requests_per_unit 0, which refuses everything
	refund refundFunc         // non-nil when lim gives units back
	remote bool               // lim decides through a store, not in process
	pol    policy.Policy
}

// Option configures a Server; options are applied once, by NewServer, before the server is
// shared. An Option holds only its argument (a flag, or a backend, logger or function that must be
// safe for concurrent use), so one may be passed to several NewServer calls, concurrently too.
type Option func(*Server) error

// WithBackend makes the server's limiters with b. The default is
// EngineBackend(engine.WithShards(16)): a config has a limiter per rate limit, and 16 shards keep
// an empty one near 10 KB (8.3 KB of heap and its sweeper goroutine's stack; the engine's default
// 256 shards, near 90 KB of heap), while its tables still grow with its keys. The Option it returns holds only b, which must be safe for concurrent use (see
// Backend): servers given the same Option share b.
func WithBackend(b Backend) Option {
	return func(s *Server) error {
		if f, ok := b.(BackendFunc); b == nil || ok && f == nil {
			return errors.New("rls: WithBackend(nil)")
		}
		s.backend = b
		return nil
	}
}

// WithHeaders makes every response that a rate limit decided carry the draft-10 RateLimit and
// RateLimit-Policy fields in response_headers_to_add, one list item per limited descriptor. A
// descriptor whose limit is requests_per_unit: 0 (which refuses every request, with no window to
// wait for) has no item: the draft's fields describe a quota that refills, and that one never does.
// A descriptor decided without its quota being judged (by the backend's failure mode, the store
// having failed, or refused before its key was read, as a new key at the key cap is) has its
// RateLimit-Policy item and no RateLimit item: a remaining count would say nothing true of it. The
// Option it returns holds only on and may be passed to any number of NewServer calls, concurrently
// too.
func WithHeaders(on bool) Option {
	return func(s *Server) error {
		s.headers = on
		return nil
	}
}

// WithNow sets the time against which the RateLimit field's t (seconds until a quota resets) is
// computed (default: time.Now). A backend built on an engine with a manual clock
// (engine.WithClock) needs a reading of that clock here, as its reset times are on it. now is
// called once per response, from any goroutine.
func WithNow(now func() time.Time) Option {
	return func(s *Server) error {
		if now == nil {
			return errors.New("rls: WithNow(nil)")
		}
		s.now = now
		return nil
	}
}

// WithLogger sends the server's log lines (reloads, backend errors) to l (default: discarded).
// The lines carry no prefix of their own: l's prefix is the one they get. l is called from any
// goroutine, as a log.Logger may be.
func WithLogger(l *log.Logger) Option {
	return func(s *Server) error {
		if l == nil {
			return errors.New("rls: WithLogger(nil)")
		}
		s.logger = l
		return nil
	}
}

// DefaultMaxDetailedSeries is how many detailed_metric series a Server makes at most, unless
// WithMaxDetailedSeries says otherwise.
const DefaultMaxDetailedSeries = 10000

// MaxDetailedValueBytes is the longest request value that a detailed_metric descriptor gives
// series of its own: the descriptor label, its entries joined as the metrics write them (such as
// path_/login), in bytes. The hits of a longer value are counted under its descriptor's config
// path, as past WithMaxDetailedSeries, and the Server logs one line saying so the first time. The
// cap on series counts values, so without this bound their size, the client's choice, would set
// what every scrape writes.
const MaxDetailedValueBytes = 256

// WithMaxDetailedSeries caps the request values that descriptors with detailed_metric get series
// of their own for, over all domains and the life of the Server, reloads included (default
// DefaultMaxDetailedSeries; 0 gives none). Each value makes four counters that are never removed,
// and the values are the client's, so without a cap a client sending distinct values would grow
// the metrics without bound. Once n exist, the hits of a value not seen before are counted under
// its descriptor's config path, as a descriptor without detailed_metric is, and the Server logs
// one line saying so (none for n = 0, which asks for that). A value longer than
// MaxDetailedValueBytes never gets series of its own. A negative n is an error. The Option it returns holds only n and may be
// passed to any number of NewServer calls, concurrently too.
func WithMaxDetailedSeries(n int) Option {
	return func(s *Server) error {
		if n < 0 {
			return fmt.Errorf("rls: WithMaxDetailedSeries(%d): must be 0 or more", n)
		}
		s.maxDetailed = n
		return nil
	}
}

// NewServer returns a Server for cfg, with one limiter per rate limit made by the backend. An
// error from the backend (a policy Redis cannot run, say) is a *ConfigError naming the file and
// the descriptor. The Server is ready for concurrent calls once returned.
func NewServer(cfg *Config, opts ...Option) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("rls: NewServer: config is nil")
	}
	s := &Server{logger: log.New(io.Discard, "", 0), now: time.Now, maxDetailed: DefaultMaxDetailedSeries}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("rls: NewServer: option %d is nil", i)
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.backend == nil {
		s.backend = EngineBackend(engine.WithShards(DefaultShards))
	}
	s.metrics = newMetrics(s.maxDetailed)
	st, err := s.build(cfg, nil)
	if err != nil {
		return nil, err
	}
	s.st = st
	s.health = health.NewServer()
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthServing)
	return s, nil
}

// build makes the limiters of cfg, reusing those of old that apply the same rate limit to the
// same descriptor of the same domain, so that a reload keeps their counts.
func (s *Server) build(cfg *Config, old *state) (*state, error) {
	st := &state{cfg: cfg, limiters: map[string]*live{}, byNode: map[*node]*live{}, series: map[*node]*series{}}
	var made []*live
	fail := func(err error) (*state, error) {
		for _, l := range made {
			closeLimiter(l.lim)
		}
		return nil, err
	}
	for _, name := range cfg.Domains() {
		d := cfg.domains[name]
		var walk func(n *node) error
		walk = func(n *node) error {
			if rl := n.limit; rl != nil && !rl.unlimited {
				var l *live
				if rl.pol == nil {
					l = &live{domain: d.name}
				} else {
					lname := limiterName(d.name, n.path, rl.pol)
					if l = st.limiters[lname]; l == nil && old != nil {
						l = old.limiters[lname]
					}
					if l == nil {
						lim, err := s.backend.NewLimiter(lname, rl.pol)
						if err == nil && lim == nil {
							// A nil limiter is how the server marks requests_per_unit: 0, which
							// refuses everything: a backend's nil must not be taken for that.
							err = errors.New("the backend returned no limiter and no error")
						}
						if err != nil {
							return &ConfigError{File: d.file, Line: n.line, Reason: fmt.Sprintf("descriptor %s: %v", n.path, err)}
						}
						l = &live{name: lname, domain: d.name, lim: lim, refund: refunderOf(lim), remote: lim != nil && engineOf(lim) == nil, pol: rl.pol}
						made = append(made, l)
					}
					st.limiters[lname] = l
				}
				st.byNode[n] = l
				st.series[n] = s.metrics.seriesFor(d.name, n.path)
			}
			for _, c := range n.exact {
				if err := walk(c); err != nil {
					return err
				}
			}
			for _, c := range n.prefixes {
				if err := walk(c); err != nil {
					return err
				}
			}
			for _, c := range n.byKey {
				if err := walk(c); err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(d.root); err != nil {
			return fail(err)
		}
	}
	return st, nil
}

// Reload swaps in cfg. Rate limits it keeps (same domain, descriptor and policy) keep their
// counts; new ones start empty. Calls that arrive once it has swapped decide on cfg at once;
// Reload then waits for the calls still deciding on the old config, and closes the limiters of
// the removed rate limits. On error the server keeps its config. Safe to call while calls are
// served.
func (s *Server) Reload(cfg *Config) error {
	if cfg == nil {
		return errors.New("rls: Reload: config is nil")
	}
	s.reload.Lock()
	defer s.reload.Unlock()
	s.mu.RLock()
	old := s.st
	s.mu.RUnlock()
	if old == nil {
		return errors.New("rls: Reload: server closed")
	}
	st, err := s.build(cfg, old)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.st = st
	s.mu.Unlock()
	old.calls.Wait() // no call joins old any more: wait for those still deciding on it
	for name, l := range old.limiters {
		if st.limiters[name] != l {
			closeLimiter(l.lim)
		}
	}
	return nil
}

// Close releases every limiter and marks the health service NOT_SERVING; later calls answer
// UNAVAILABLE. It waits for calls in progress. Safe to call more than once, and concurrently: it
// waits for a Reload in progress, and a second Close waits for the first and then finds nothing
// left to release.
func (s *Server) Close() error {
	s.reload.Lock()
	defer s.reload.Unlock()
	s.health.Shutdown()
	s.mu.Lock()
	st := s.st
	s.st = nil
	s.mu.Unlock()
	if st != nil {
		st.calls.Wait()
		// At once: a limiter on a hung Redis (a batched one giving its leases back) takes a few
		// of its timeouts to close.
		var wg sync.WaitGroup
		for _, l := range st.limiters {
			wg.Go(func() { closeLimiter(l.lim) })
		}
		wg.Wait()
	}
	return nil
}

// Config returns the config in use. Safe for concurrent use.
func (s *Server) Config() *Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.st == nil {
		return nil
	}
	return s.st.cfg
}

// check is one descriptor of a request that a rate limit applies to, and the later descriptors of
// the request that name the same limit and key (dups), decided with it as one take of their costs
// summed: decided apart, each would be judged against the others' takes, which a refusal then
// gives back, and report a remaining count and a wait that no longer hold.
type check struct {
	i        int
	dups     []dup
	node     *node
	live     *live
	key      string
	cost     int64   // the descriptor's cost and its dups', summed (clamped as one cost is)
	hits     float64 // the descriptor's own hits, clamped as its cost is, for the metrics
	d        slidelimit.Decision
	taken    bool // decided by a take (not a query)
	failed   bool // the backend failed, and d is its failure mode's, not a measure of the quota
	refunded int64
	query    slidelimit.Decision // what a query found before the takes (see predict)
	queried  bool
}

// dup is a descriptor decided with an earlier one: its index in the request, and its own hits.
type dup struct {
	i    int
	hits float64
}

// ShouldRateLimit decides a request, all or nothing: when any descriptor that is not in shadow
// mode refuses, the response is OVER_LIMIT and no descriptor keeps the hit (exactly with the
// engine; see RedisBackend for the store). Each descriptor's cost is its own hits_addend when set,
// where 0 is a check that takes nothing and is never refused; else the request's, where 0 means
// 1. A descriptor whose rate_limit is unlimited is OK with limit_remaining 4294967295; one listed
// without a rate_limit, and unknown domains and descriptors, are OK with 0. Safe for concurrent
// use.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	// Closed first: a closed Server answers every call UNAVAILABLE, a malformed one too.
	s.mu.RLock()
	st := s.st
	if st != nil {
		st.calls.Add(1)
	}
	s.mu.RUnlock()
	if st == nil {
		return nil, status.Error(codes.Unavailable, "rls: server closed")
	}
	defer st.calls.Done()
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rls: domain is empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rls: no descriptors")
	}
	resp, err := s.decide(ctx, st, req)
	s.metrics.latency.Observe(time.Since(start).Seconds())
	return resp, err
}

func (s *Server) decide(ctx context.Context, st *state, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	descs := req.GetDescriptors()
	var twins twinIndex
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs)),
	}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	dom := st.cfg.domains[req.GetDomain()]
	checks := make([]check, 0, len(descs))
	var replaced map[string]bool
	for i, d := range descs {
		if d.GetIsNegativeHits() {
			return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: is_negative_hits is not supported", i)
		}
		if dom == nil {
			continue
		}
		entries := make([]entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = entry{e.GetKey(), e.GetValue()}
		}
		n := dom.match(entries)
		if n == nil || n.limit == nil {
			continue
		}
		// An unlimited limit still replaces others, as in envoyproxy/ratelimit: that is how a
		// descriptor exempts a request from a limit it also matches.
		for _, r := range n.limit.replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
		if n.limit.unlimited {
			// As envoyproxy/ratelimit answers, so that a client can tell an unlimited
			// descriptor from one no limit matched (whose limit_remaining is 0).
			resp.Statuses[i].LimitRemaining = math.MaxUint32
			continue
		}
		// The request's hits_addend, 0 meaning 1; a descriptor's own, when set, as is: 0 is a
		// check that takes nothing (envoyproxy/ratelimit's "check only").
		hits := max(uint64(req.GetHitsAddend()), 1)
		if h := d.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		}
		// Every cost above the largest limit decides alike; the clamp keeps it an int64, and
		// keeps one huge hits_addend from taking the hit counters past where a float64 still
		// counts the next hit.
		cost := int64(min(hits, uint64(policy.MaxLimit)+1))
		c := check{i: i, node: n, live: st.byNode[n], key: subjectOf(entries), cost: cost, hits: float64(cost)}
		if k, ok := twins.find(checks, c.live, c.key); ok {
			o := &checks[k]
			o.dups = append(o.dups, dup{i, c.hits})
			o.cost = min(o.cost+cost, policy.MaxLimit+1)
		} else {
			checks = append(checks, c)
		}
	}
	if replaced != nil {
		kept := checks[:0]
		for _, c := range checks {
			if c.node.limit.name == "" || !replaced[c.node.limit.name] {
				kept = append(kept, c)
			}
		}
		checks = kept
	}
	if len(checks) == 0 {
		return resp, nil
	}

	refundable := true
	for _, c := range checks {
		refundable = refundable && (c.live.lim == nil || c.live.refund != nil)
	}
	parallel := false
	switch {
	case !refundable && len(checks) > 1:
		var err error
		if parallel, err = s.predict(ctx, checks); err != nil {
			return nil, err
		}
	case len(checks) > 1:
		// A remote store that gives units back (redisstore) is asked for every descriptor at
		// once, one round trip of latency; if one refuses, the others give back what they took.
		// The engine decides in nanoseconds: in order, with no goroutines.
		for _, c := range checks {
			parallel = parallel || c.live.remote
		}
	}
	refused, stopped := false, len(checks)
	if parallel {
		// Take them all at once, one round trip of latency rather than one per descriptor.
		if err := s.takeAll(ctx, checks); err != nil {
			s.giveBack(ctx, checks, true)
			return nil, err
		}
		for _, c := range checks {
			refused = refused || c.refuses()
		}
	} else {
		for k := range checks {
			c := &checks[k]
			if refused && !refundable {
				// A store that cannot give units back takes nothing after a refusal: the rest
				// are only queried, to report what they have left.
				stopped = k
				break
			}
			if err := s.take(ctx, c, c.cost); err != nil {
				s.giveBack(ctx, checks[:k], false)
				return nil, err
			}
			if c.refuses() {
				refused = true
			}
		}
	}
	if refused {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		s.giveBack(ctx, checks[:stopped], parallel)
		for k := stopped; k < len(checks); k++ {
			c := &checks[k]
			if c.queried {
				c.d, c.taken = c.query, false
				continue
			}
			if err := s.take(ctx, c, 0); err != nil {
				return nil, err
			}
		}
	}
	now := s.now()
	for k := range checks {
		c := &checks[k]
		// Each descriptor counts its own hits in the metrics, those only queried after a
		// refusal included: they were decided, as a store that gives units back decides them by
		// a take it gives back.
		over, near := outcomeOf(c)
		own := func(i int, hits float64) {
			ds := resp.Statuses[i]
			s.fill(ds, c)
			over := over
			if hits == 0 && over {
				// A check takes nothing and is never refused, also beside a refused twin, whose
				// status says what remains as its own does.
				ds.Code, ds.DurationUntilReset, over = rlsv3.RateLimitResponse_OK, nil, false
			}
			s.count(st, req.GetDomain(), descs[i], c.node, hits, over, near)
		}
		own(c.i, c.hits)
		for _, d := range c.dups {
			own(d.i, d.hits)
		}
	}
	if s.headers {
		resp.ResponseHeadersToAdd = headersFor(checks, now)
	}
	return resp, nil
}

// refuses reports whether c's decision refuses the request: a refused hit not in shadow mode. A
// check (no hits) never does, though the backend may refuse it (a new key past the key cap, or a
// store down under -on-redis-error closed): its own status is OK, and so must the request's be.
func (c *check) refuses() bool { return !c.d.Allowed && !c.node.shadow && c.cost > 0 }

// take decides n units for c (n = 0: a query). A backend error is counted and logged, and the
// Decision the backend's failure mode made stands; a cancelled call is the caller's.
func (s *Server) take(ctx context.Context, c *check, n int64) error {
	c.taken = n > 0
	if c.live.lim == nil {
		// requests_per_unit 0 refuses every hit; a check of 0 hits asks for nothing, and is
		// told that nothing remains.
		c.d = slidelimit.Decision{Allowed: n == 0, Limit: 0, Reason: slidelimit.ReasonLimited}
		if n == 0 {
			c.d.Reason = slidelimit.ReasonOK
		}
		return nil
	}
	d, err := c.live.lim.Take(ctx, c.key, n)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return status.FromContextError(ctxErr).Err()
		}
		s.metrics.backendErrors.Inc()
		s.logBackendError(c, err, fmt.Sprintf("decided %v by the backend's failure mode", d.Allowed))
	} else if !d.QuotaKnown() && d.Reason == slidelimit.ReasonCostAboveLimit {
		// Refused before the key was read (GCRA above its burst): the status still says what
		// the key has left, as every other refusal's does, read without taking anything.
		d = standing(ctx, c, d)
	}
	c.d, c.failed = d, err != nil
	return nil
}

// standing returns refusal d with the Remaining and ResetAt of c's key as it stands, read
// without taking anything (the engine's Peek; elsewhere a take of 0 units, one more round trip),
// or d unchanged when that read fails or judges nothing.
func standing(ctx context.Context, c *check, d slidelimit.Decision) slidelimit.Decision {
	var q slidelimit.Decision
	if e := engineOf(c.live.lim); e != nil {
		q = e.Peek(c.key)
	} else if r, err := c.live.lim.Take(ctx, c.key, 0); err == nil {
		q = r
	}
	if q.QuotaKnown() && !q.ResetAt.IsZero() {
		d.Remaining, d.ResetAt = q.Remaining, q.ResetAt
	}
	return d
}

// predict serves limiters that cannot give units back: it queries every descriptor at once
// (cost 0, in parallel, one round trip of latency) and moves those that would refuse to the
// front, so that the takes stop at a refusal before anything was charged. A request that races
// another between the query and the take, or whose query answered from stale knowledge (a
// batched limiter answers from what it last heard from Redis), can still leave an earlier
// descriptor charged.
// It reports whether every descriptor is expected to admit, so that they may be taken in
// parallel.
func (s *Server) predict(ctx context.Context, checks []check) (allAdmit bool, err error) {
	errs := make([]error, len(checks))
	atOnce(len(checks), func(k int) {
		c := &checks[k]
		if c.live.lim == nil || c.node.shadow {
			return
		}
		d, err := c.live.lim.Take(ctx, c.key, 0)
		if err != nil && ctx.Err() != nil {
			errs[k] = status.FromContextError(ctx.Err()).Err()
			return
		}
		c.query, c.queried = d, err == nil
	})
	for _, err := range errs {
		if err != nil {
			return false, err
		}
	}
	refuses := func(c *check) bool {
		return c.live.lim == nil || c.queried && c.query.Remaining < c.cost && !c.node.shadow
	}
	sort.SliceStable(checks, func(i, j int) bool { return refuses(&checks[i]) && !refuses(&checks[j]) })
	return !refuses(&checks[0]), nil
}

// takeAll takes every check at once.
func (s *Server) takeAll(ctx context.Context, checks []check) error {
	errs := make([]error, len(checks))
	atOnce(len(checks), func(k int) { errs[k] = s.take(ctx, &checks[k], checks[k].cost) })
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// maxAtOnce bounds the goroutines one request's descriptors are decided on: a request may hold
// thousands of descriptors, and a goroutine for each would queue them all on the store client's
// connection pool at once, to fail there on its timeout.
const maxAtOnce = 32

// atOnce calls f(0), ..., f(n-1) on up to maxAtOnce goroutines and returns when every call has.
func atOnce(n int, f func(k int)) {
	workers := min(n, maxAtOnce)
	var next atomic.Int64
	var wg sync.WaitGroup
	wg.Add(workers)
	for range workers {
		go func() {
			defer wg.Done()
			for k := int(next.Add(1) - 1); k < n; k = int(next.Add(1) - 1) {
				f(k)
			}
		}()
	}
	wg.Wait()
}

// logBackendError logs at most one backend error a second, with the number left out since the
// last line: a store that is down fails every call, and the metric counts them all.
func (s *Server) logBackendError(c *check, err error, what string) {
	now := time.Now().UnixNano()
	next := s.nextLog.Load()
	if now < next || !s.nextLog.CompareAndSwap(next, now+int64(time.Second)) {
		s.unlogged.Add(1)
		return
	}
	more := ""
	if n := s.unlogged.Swap(0); n > 0 {
		more = fmt.Sprintf("; %d more backend errors since the last line", n)
	}
	s.logger.Printf("domain %s descriptor %s: %v (%s)%s", c.live.domain, c.node.path, err, what, more)
}

// giveBack returns what the admitted checks took, where the limiter can: at once where they were
// taken at once (on a store; one after another, a refusal among thousands of descriptors on Redis
// took a round trip each, and outlasted the shutdown's grace), else in order, with no goroutines.
func (s *Server) giveBack(ctx context.Context, checks []check, atOnceToo bool) {
	each := func(k int) {
		c := &checks[k]
		if c.taken && c.d.Allowed && c.live.refund != nil {
			// Given back even if the caller has gone: the units must not stay charged.
			g, err := c.live.refund(context.WithoutCancel(ctx), c.key, c.cost, c.d)
			c.refunded = g
			// The header's t then says when the limit resets as it stands again: for a bucket,
			// the time it is full moves back with the units. The engine is read back; another
			// backend (Redis) moves back by the exact refill of what came back, never before now.
			if e := engineOf(c.live.lim); e != nil && g > 0 {
				if p := e.Peek(c.key); p.QuotaKnown() {
					c.d.ResetAt = p.ResetAt
				}
			} else if g > 0 {
				c.d.ResetAt = rules.FullSooner(c.d.ResetAt, g, rules.BucketRate(c.live.pol), s.now())
			}
			if err != nil {
				// The units stay charged (see refunderOf); the metric and the log say so.
				s.metrics.backendErrors.Inc()
				s.logBackendError(c, err, fmt.Sprintf("giving back %d units of a refused request: they stay charged", c.cost))
			}
		}
	}
	if atOnceToo {
		atOnce(len(checks), each)
		return
	}
	for k := range checks {
		each(k)
	}
}

func (s *Server) fill(st *rlsv3.RateLimitResponse_DescriptorStatus, c *check) {
	rl := c.node.limit
	cl := &rlsv3.RateLimitResponse_RateLimit{
		Name:            rl.name,
		RequestsPerUnit: uint32(rl.perUnit),
		Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(rl.unit),
	}
	if rl.multiplier > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(rl.multiplier)
	}
	st.CurrentLimit = cl
	d := c.d
	remaining := d.Remaining
	if c.refunded > 0 {
		remaining = min(remaining+c.refunded, d.Limit)
	}
	st.LimitRemaining = uint32(min(remaining, math.MaxUint32))
	overLimit, _ := outcomeOf(c)
	switch {
	case overLimit && c.node.shadow:
		st.Code = rlsv3.RateLimitResponse_OK
	case overLimit:
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	// Only a refusal has a time that means something exact: when the same hit would be admitted.
	// An admitted hit's "reset" would be the end of an aligned window, which a sliding window
	// does not have; its status leaves the field out.
	if !d.Allowed && d.RetryAfter > 0 && !c.node.shadow {
		st.DurationUntilReset = durationpb.New(d.RetryAfter)
	}
}

// outcomeOf reports whether c is over its limit (refused, or only queried and short of its cost)
// and, if not, whether its hit leaves less than a fifth of the limit (envoyproxy/ratelimit's
// default near-limit ratio).
func outcomeOf(c *check) (over, near bool) {
	d := c.d
	if c.failed && d.Allowed {
		return false, false // admitted by the failure mode: nothing is known of what is left
	}
	left := d.Remaining
	if !c.taken {
		left -= c.cost
	}
	if !d.Allowed || left < 0 {
		return true, false
	}
	return false, d.Limit > 0 && (d.Limit-left)*5 > d.Limit*4
}

// count records one descriptor's hits in the metrics, under its config path, or the request's
// own entries for a descriptor with detailed_metric.
func (s *Server) count(st *state, domain string, d *ratelimitv3.RateLimitDescriptor, n *node, hits float64, over, near bool) {
	m := st.series[n]
	if n.detailed {
		parts := make([]string, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			parts[j] = segment(e.GetKey(), e.GetValue())
		}
		// Metric label values must be UTF-8: gRPC's decoding makes them so, but a caller of
		// ShouldRateLimit in the same process may pass any bytes.
		label := strings.ToValidUTF8(strings.Join(parts, "."), "\uFFFD")
		if len(label) > MaxDetailedValueBytes {
			// The cap on series counts values, not bytes: without this bound, a few values of a
			// megabyte each would make every scrape hundreds of megabytes.
			if s.metrics.maxDetailed > 0 && s.detailedLong.CompareAndSwap(false, true) {
				s.logger.Printf("detailed_metric: a request value of %d bytes is longer than %d; such values are counted under their descriptor's config path", len(label), MaxDetailedValueBytes)
			}
		} else if dm := s.metrics.detailedFor(domain, label); dm != nil {
			m = dm
		} else if s.metrics.maxDetailed > 0 && s.detailedFull.CompareAndSwap(false, true) {
			s.logger.Printf("detailed_metric: %d series of request values reached (the most there may be); values not seen before are counted under their descriptor's config path from now on", s.metrics.maxDetailed)
		}
	}
	m.hits.Add(hits)
	switch {
	case over:
		m.overLimit.Add(hits)
		if n.shadow {
			m.shadow.Add(hits)
		}
	case near:
		m.nearLimit.Add(hits)
	}
}

// twinIndex finds the check that a descriptor is a twin of (same limiter, same key). A request
// has a handful of descriptors, scanned in place; a map takes over past twinScan of them, so that
// one with thousands (a message of up to 4 MiB can hold 100,000) costs linear time rather than
// quadratic while a reload waits for the call.
type twinIndex map[twinKey]int

type twinKey struct {
	live *live
	key  string
}

const twinScan = 16

func (x *twinIndex) find(checks []check, l *live, key string) (int, bool) {
	if *x == nil && len(checks) <= twinScan {
		for k := range checks {
			if checks[k].live == l && checks[k].key == key {
				return k, true
			}
		}
		return 0, false
	}
	if *x == nil {
		*x = make(twinIndex, 2*len(checks))
		for k := range checks {
			(*x)[twinKey{checks[k].live, checks[k].key}] = k
		}
	}
	k, ok := (*x)[twinKey{l, key}]
	if !ok {
		(*x)[twinKey{l, key}] = len(checks) // the caller appends it next
	}
	return k, ok
}

// subjectOf is the limiter key of a request descriptor: its entries as k=v joined by '&', with
// '%', '=' and '&' percent-escaped so that distinct entry lists never share a key.
func subjectOf(entries []entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('&')
		}
		escapeTo(&b, e.key)
		b.WriteByte('=')
		escapeTo(&b, e.value)
	}
	return b.String()
}

func escapeTo(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, "%=&") {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '=', '&':
			fmt.Fprintf(b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
}

// headersFor formats the draft-10 RateLimit-Policy and RateLimit fields, one list item per
// enforced descriptor, named by its rate limit's name or its config path. A descriptor in shadow
// mode has no item: the client is told only of the limits that can refuse it, so that a limit
// being tried out does not make clients back off. The items are in the request's order of
// descriptors, as the statuses are, whatever order the checks were decided in (see predict).
func headersFor(checks []check, now time.Time) []*corev3.HeaderValue {
	var pol, cur []string
	order := make([]int, len(checks))
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(checks[a].i, checks[b].i) })
	for _, k := range order {
		c := &checks[k]
		if c.live.pol == nil || c.node.shadow {
			continue
		}
		name := c.node.limit.name
		if name == "" {
			name = c.node.path
		}
		q := httplimit.QuotaOf(name, c.live.pol)
		item := sfString(name)
		p := item + ";q=" + strconv.FormatInt(q.Limit, 10)
		if q.Window > 0 {
			p += ";w=" + strconv.FormatInt(ceilSeconds(q.Window), 10)
		}
		pol = append(pol, p)
		d := c.d
		if c.failed || !d.QuotaKnown() {
			// Decided without the quota being judged: by the failure mode while the store
			// failed (an admission's r=0 would tell the client it has nothing left, a refusal's
			// t is the circuit breaker's, not the quota's), or refused before the policy looked
			// at the key (a new key at the key cap, a closed limiter, a cost above what it can
			// ever admit), whose Remaining of 0 would tell the client a quota is spent. The
			// policy item stays, as the limit is known.
			continue
		}
		remaining := d.Remaining
		if c.refunded > 0 {
			remaining = min(remaining+c.refunded, d.Limit)
		}
		item += ";r=" + strconv.FormatInt(remaining, 10)
		t := d.RetryAfter
		switch {
		case c.refunded > 0 && remaining >= d.Limit:
			// Given back whole: nothing is used, so nothing is waiting to reset. A partial
			// refund keeps the decision's reset time, the latest the quota can be whole again.
			t = 0
		case !d.Allowed && t == 0:
			// A cost above what the limit can ever admit: no wait admits it, and t would say
			// one does (as httplimit, which gives such a refusal no t either).
			cur = append(cur, item)
			continue
		case d.Allowed:
			t = max(d.ResetAt.Sub(now), 0)
		}
		cur = append(cur, item+";t="+strconv.FormatInt(ceilSeconds(t), 10))
	}
	if len(pol) == 0 {
		return nil
	}
	h := []*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: strings.Join(pol, ", ")}}
	if len(cur) > 0 {
		h = append(h, &corev3.HeaderValue{Key: "RateLimit", Value: strings.Join(cur, ", ")})
	}
	return h
}

// sfString quotes s as a structured-field string, percent-encoding the bytes it cannot hold.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f && c != '%':
			b.WriteByte(c)
		default:
			// A structured-field string holds printable ASCII only: the other bytes, and '%'
			// itself, are percent-encoded, so that "café" and "caf" stay two names.
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
