package httplimit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// ErrorMode says what the middleware (or the Listener) does with a request (or a connection) when
// the Limiter returns an error: the root package's FailureMode. FailOpen (the default) serves the
// request as if it were admitted, without a RateLimit item for the failing limit (the other
// limits keep theirs), after calling OnError (a negative
// cost excepted: see Middleware.Cost). FailClosed
// answers 503 Service Unavailable with Retry-After (the Decision's RetryAfter rounded up, at least
// 1 second), after calling OnError. FailLocal (TrustDecision) admits or refuses on the Decision
// returned with the error, after calling OnError: right for a Limiter that decides something
// sensible itself when its store fails, such as redisstore with a fallback limiter. A refusal gets
// 429 and that Decision's Retry-After, and the limit keeps its RateLimit-Policy item but has no
// RateLimit item, as under FailOpen: the fallback's figures (a share of the limit, the count of one
// process) are not those of the quota RateLimit-Policy advertises. A closed limiter's Decision
// (ReasonClosed) decides nothing, so FailLocal answers it as FailClosed does. A plain value, safe
// to copy and to share between goroutines.
type ErrorMode = slidelimit.FailureMode

// The error modes, as in the root package.
const (
	FailOpen   = slidelimit.FailOpen
	FailClosed = slidelimit.FailClosed
	FailLocal  = slidelimit.FailLocal
	// TrustDecision is FailLocal's earlier name.
	TrustDecision = slidelimit.FailLocal
)

// ErrNoLimiter is the error Validate returns (wrapped, naming the field) for a nil Limiter, which
// is also what Local(nil) returns: an engine.New whose error went unchecked. A sentinel, compared
// with errors.Is from any goroutine; never reassigned.
var ErrNoLimiter = errors.New("httplimit: no limiter")

// Limit is one more limit a request must fit, beside Middleware.Limiter: a Limiter and the
// Quota its fields advertise. A plain value, safe to copy and to share between goroutines; copies
// share one Limiter, which the middleware calls from every request's goroutine at once.
type Limit struct {
	// Limiter decides this limit. Required.
	Limiter Limiter
	// Quota is as Middleware.Quota; its Name must differ from every other limit's.
	Quota Quota
}

// Middleware limits the requests that reach a handler. Fill in the fields, then call Wrap; every
// field but Limiter may be left zero, and a nil hook means the default its comment states.
//
// For each request Wrap's handler computes a key (KeyFunc) and a cost (Cost), asks every limit
// (Limiter, then Limits) for that many units, and then:
//   - every limit admitted: sets RateLimit-Policy and RateLimit and calls the next handler;
//   - one refused: gives back what the others counted, sets those fields and Retry-After (the
//     longest wait of the refusing limit and of the limits not asked that have too little left
//     for the request's cost, as far as their Limiter can report it without counting: the
//     engine's PeekN, or a method PeekN(key string, n int64) slidelimit.Decision; a Limiter with
//     only a method Peek(key string) slidelimit.Decision is read for one unit, so that a limit of
//     its with a unit left but fewer than the request's cost does not lengthen the wait; a
//     refusal that is not over a limit, such as ReasonKeyCap, gets OnLimited's Retry-After
//     instead), and calls OnLimited (429 by default);
//   - a Limiter failed: calls OnError and does what ErrorMode says (serve, by default).
//
// Several limits are all or nothing: a request refused by one consumes nothing of the others. The
// limits whose quotas the request's cost is above are asked first: those whose quota is their
// Limiter's own policy's, smallest first, then those whose Limiter can give back, smallest first
// (a Quota.Limit set by hand may be below what the Limiter admits, which then admits, and the next
// is asked). One whose own quota the cost is above refuses the request for its cost, with no
// Retry-After, where a used-up limit asked before it would have given a wait after which the
// request is refused all the same.
// The middleware gives units back through the Limiter: an in-process engine (Local) gives back
// what its policy can give back exactly (the sliding counter and the fixed window, and the token
// bucket, GCRA and leaky bucket at once: all of it where their Rate divides 1000, else all but at
// most what they refill in a millisecond, rounded up to a whole unit (one unit at up to 1,000 a
// second), which then refills as any unit does (see engine.Limiter.Refund); not the sliding log
// nor the dual bucket), and any other
// Limiter that has a method Refund(ctx context.Context, key string, n int64, d slidelimit.Decision)
// (int64, error) is asked the same way, unless its method Policy() policy.Policy reports a sliding
// log or a dual bucket (redisstore's Refund gives those nothing back either). Limiters that
// cannot give back are asked last, so that
// with at most one of them the rule holds exactly; with two or more, a refusal by a later one
// leaves the earlier ones charged. A limit not asked because an earlier one refused is still
// listed in RateLimit when its Limiter can report it without counting: the engine's PeekN, or a
// method PeekN or Peek as above. A limit that refused without judging the key's
// quota (ReasonKeyCap, ReasonNegativeCost, ReasonInvalidLimit, ReasonClosed, and a
// ReasonCostAboveLimit made before the key was read: see slidelimit.Decision.QuotaKnown) is left
// out of RateLimit: its Decision knows nothing of the quota, and r=0 would say it is spent.
//
// Middlewares stack: an inner middleware (for one route, say) below an outer one (for the whole
// server) finds the outer one's decisions in the request context. When the inner one refuses,
// it gives back what the outer one counted, as far as the outer limits can give back (a Shadow
// one never refuses, so the outer one's count stands; an outer sliding log or dual bucket stays
// charged, as the outer one was asked first), and both write their limits into one
// RateLimit-Policy and one RateLimit field, outer first, so that neither overwrites the other.
// The outer one's decisions are given back once, by the first refusal below it: a handler that
// serves several requests under one request's context (fanning it out) through an inner
// middleware has the outer unit given back when any of them is refused. Stacked middlewares need
// names of their own (Quota.Name), as several limits of one do: Validate sees one middleware, and
// two items of one name in a field cannot be told apart.
//
// In Shadow mode every request is decided, counted and reported to OnDecision, but every request
// reaches the next handler and no field is added: the response is exactly what it would be
// without the limiter, so that clients which honour RateLimit cannot throttle themselves on a
// limit that is only being tried out.
//
// Wrap reads the fields once; changing them afterwards does not affect handlers already returned.
// A lone middleware sets the same RateLimit-Policy value, one shared slice, on every response:
// a handler may replace the field but must not modify its value in place.
// The handler is safe for concurrent use, and calls the hooks from the goroutines that serve the
// requests, possibly many at once: hooks must be safe for concurrent use themselves.
type Middleware struct {
	// Limiter decides. Required (Local(nil) is nil: check engine.New's error).
	Limiter Limiter

	// Quota is what the RateLimit-Policy field advertises, and its Name names the policy in the
	// RateLimit field. A zero Limit means: derive it (with QuotaOf) from the Limiter's policy when
	// the Limiter reports one (Local and redisstore do), else send no RateLimit-Policy field. An
	// empty Name means "default".
	Quota Quota

	// Limits are further limits every request must fit too, all or nothing (see above), for
	// example 10 per second and 1,000 per hour. Each is listed in both fields under its Quota's
	// Name, which must be set and distinct.
	Limits []Limit

	// KeyFunc returns the key a request is limited by. nil means the peer's IP address, IPv6
	// grouped by /64 ((*ClientIP).Key with no trusted proxies). See ClientIP, KeyByHeader,
	// KeyByPathAndIP and KeyByConn. An empty key is a key like any other: every request keyed ""
	// shares one allowance; to exempt a request from limiting, use Skip.
	KeyFunc func(r *http.Request) string

	// Cost returns how many units a request takes. nil means 1 for every request. A negative
	// cost is a programming error: it is refused with 500 and ReasonNegativeCost, in every
	// ErrorMode, without asking any Limiter (one might admit it, or take it as units to give
	// back).
	Cost func(r *http.Request) int64

	// Skip reports requests that bypass the limiter: not counted, no field added (health checks,
	// say). nil means none.
	Skip func(r *http.Request) bool

	// OnLimited writes the response to a refused request; Retry-After (when waiting helps),
	// RateLimit-Policy and RateLimit are already set on w's header. d.Reason tells a refusal over
	// the limit (ReasonLimited) from the others. nil means the default: 429 Too Many Requests for
	// ReasonLimited and ReasonCostAboveLimit (the latter without Retry-After: waiting never
	// helps), 503 Service Unavailable with Retry-After: 1 for ReasonKeyCap (the limiter tracks as
	// many keys as it may) and ReasonClosed (a Limiter that says it is closed without an error),
	// 500 Internal Server Error for ReasonNegativeCost and ReasonInvalidLimit; each with a short
	// body naming the reason (see Problem).
	OnLimited func(w http.ResponseWriter, r *http.Request, d engine.Decision)

	// Problem makes the default refusal bodies RFC 9457 problem details
	// (application/problem+json). A refusal over the limit (ReasonLimited, or a cost above it:
	// ReasonCostAboveLimit) uses the rate limit fields' problem type
	// "https://iana.org/assignments/http-problem-types#quota-exceeded", with "violated-policies"
	// naming the refusing limit; the others use "about:blank".
	Problem bool

	// MaxDelay, when positive, makes a request over the limit wait instead of being refused, much
	// as nginx's limit_req delay does: when the wait the limits ask for ends within MaxDelay of
	// the request's first refusal, the request sleeps it and is decided again; otherwise, or when
	// the request's context ends, it is refused. Unlike nginx, which queues a key's delayed
	// requests, the waiters of one key are not served in the order they came: each that wakes
	// tries again, one takes the unit freed, and the others wait for the next, so an early one can
	// wait out MaxDelay and be refused while a later one is admitted, and each retry is a decision
	// (a round trip, on Redis). So a request waits at most MaxDelay in all, and a
	// timer's lateness. Each wait is the one Retry-After would give: the refusing limit's
	// RetryAfter, or longer when a limit not asked has too little left for longer. A waiting
	// request holds its goroutine and connection; nothing of this middleware's limits is counted
	// while it waits (an outer middleware's, which admitted it, stays counted). A request that a
	// limit has counted before another refused it, and that the limit could not give back (with
	// two or more limits that cannot, see above, or a Refund that failed), is refused at once:
	// decided again, it would be counted there twice.
	MaxDelay time.Duration

	// MaxWaiting bounds how many requests may wait under MaxDelay at once, across every client
	// of this middleware (nginx bounds its delayed requests by the burst): a request that would
	// wait while MaxWaiting others do is refused at once, as without MaxDelay. 0 means 1024, so
	// that clients over their limit cannot hold an unbounded number of goroutines and
	// connections; negative is refused by Validate.
	MaxWaiting int

	// Waiting is the count MaxWaiting bounds. nil means one of the middleware's own. Middlewares
	// given the same Waiting share one count, each bounding it by its own MaxWaiting: a server
	// that builds a new middleware on a configuration reload passes the old one's, so that the
	// requests still waiting under the old middleware count against the new one's bound too.
	Waiting *Waiting

	// StopWaiting, once closed, ends every wait under MaxDelay: a waiting request is decided
	// again at once, and so refused with a fresh Retry-After (or admitted, had its turn come), as
	// without MaxDelay; later requests over the limit no longer wait. A server that shuts down
	// closes it first, so that its waiting clients get an answer rather than a connection cut
	// when the shutdown's grace period ends. nil means never. Closing a Limiter does not end the
	// waits on it (the interface has no way to say it closed): close StopWaiting before it, as
	// the command's proxy does.
	StopWaiting <-chan struct{}

	// OnDecision observes every decision the Limiters made (admitted or refused, in Shadow mode
	// too), for metrics and logs, before the response is written: once per request, with the
	// refusing limit's Decision or, when every limit admitted, the one with the least Remaining.
	// A request answered 503 because a Limiter returned an error (under FailClosed, or a closed
	// limiter's ErrClosed) is OnError's, not OnDecision's, even when an earlier limit had admitted
	// it; a ReasonClosed refusal that came without an error (see OnLimited) is OnDecision's, as
	// every other refusal is. nil means none.
	OnDecision func(r *http.Request, key string, d engine.Decision)

	// OnError observes every error from a Limiter, before ErrorMode is applied, and a
	// configuration error (key ""), on every request, from a handler Wrap built out of a
	// configuration Validate refuses. A Limiter's Refund that fails, giving back what a request had
	// counted there (refused by another limit, or answered 503 for another's error), is reported
	// too: its units stay counted, and the request is answered as it would have been. nil means
	// none.
	OnError func(r *http.Request, key string, err error)

	// ErrorMode is what happens to a request when a Limiter returns an error (default
	// FailOpen).
	ErrorMode ErrorMode

	// Shadow decides and reports without ever refusing a request or adding a field. A Limiter's
	// error goes to OnError; under FailLocal its fallback's Decision is reported to OnDecision as
	// any other, and under FailOpen and FailClosed that limit is passed over.
	Shadow bool

	// Now is the time against which the RateLimit field's t (seconds until the quota resets) is
	// computed. nil means time.Now; tests driving the engine with a manual clock pass a reading
	// of that clock.
	Now func() time.Time
}

// Validate reports a configuration that Wrap cannot serve: a nil *Middleware or a nil Limiter
// (ErrNoLimiter, as from Local(nil)), a nil Limits entry, a Quota.Name with characters an HTTP
// structured-field string cannot hold, names that are missing or repeated among several limits, a
// negative Quota, a Quota.Limit above 999,999,999,999,999 (the largest integer such a field can
// carry; a larger Remaining is sent as that), a negative MaxDelay or MaxWaiting, or an unknown
// ErrorMode. The error names the field and the value. It only reads m: calls may run at once with
// each other and with Wrap, not with a change to m.
func (m *Middleware) Validate() error {
	if m == nil {
		return fmt.Errorf("%w: the *Middleware is nil", ErrNoLimiter)
	}
	if m.Limiter == nil {
		return fmt.Errorf("%w: Middleware.Limiter is nil (httplimit.Local(nil) is nil: check engine.New's error)", ErrNoLimiter)
	}
	seen := map[string]string{}
	check := func(field string, q Quota, named bool) error {
		for i := 0; i < len(q.Name); i++ {
			if c := q.Name[i]; c < 0x20 || c > 0x7e {
				return fmt.Errorf("httplimit: %s.Name = %q: only printable ASCII is allowed", field, q.Name)
			}
		}
		if q.Limit < 0 || q.Window < 0 {
			return fmt.Errorf("httplimit: %s = {Limit: %d, Window: %v}: must not be negative", field, q.Limit, q.Window)
		}
		if q.Limit > maxSFInteger {
			return fmt.Errorf("httplimit: %s.Limit = %d: above %d, the largest integer a structured field can carry", field, q.Limit, int64(maxSFInteger))
		}
		name := q.Name
		if name == "" {
			if named {
				return fmt.Errorf("httplimit: %s.Name is empty: each of several limits needs its own name", field)
			}
			name = "default"
		}
		if other, dup := seen[name]; dup {
			return fmt.Errorf("httplimit: %s.Name = %q: %s has the same name", field, name, other)
		}
		seen[name] = field
		return nil
	}
	if err := check("Middleware.Quota", m.Quota, false); err != nil {
		return err
	}
	for i, l := range m.Limits {
		field := "Middleware.Limits[" + strconv.Itoa(i) + "]"
		if l.Limiter == nil {
			return fmt.Errorf("%w: %s.Limiter is nil", ErrNoLimiter, field)
		}
		if err := check(field+".Quota", l.Quota, true); err != nil {
			return err
		}
	}
	if m.ErrorMode > FailLocal {
		return fmt.Errorf("httplimit: Middleware.ErrorMode = %d: unknown mode", m.ErrorMode)
	}
	if m.MaxDelay < 0 {
		return fmt.Errorf("httplimit: Middleware.MaxDelay = %v: must not be negative", m.MaxDelay)
	}
	if m.MaxWaiting < 0 {
		return fmt.Errorf("httplimit: Middleware.MaxWaiting = %d: must not be negative", m.MaxWaiting)
	}
	return nil
}

// Wrap returns a handler that limits the requests reaching next. On a configuration Validate
// refuses, or a nil next, it returns a handler that answers every request with 500 Internal
// Server Error and reports the error to OnError: a misconfigured limiter neither panics nor lets
// traffic through unlimited, and charges nothing (an outer middleware that admitted the request
// gives its units back, as for a limiter that fails closed). Wrap only reads m, as Validate does, and the
// handler it returns is safe for concurrent use.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	// Counted whether or not it is valid: a misconfigured handler below another gives the other's
	// units back too, through the frame the other passes only once there are two handlers.
	handlers.Add(1)
	if err := m.Validate(); err != nil {
		if m == nil {
			return &broken{err: err}
		}
		return &broken{err: err, onError: m.OnError, problem: m.Problem}
	}
	if next == nil {
		return &broken{err: errors.New("httplimit: Middleware.Wrap(nil): no handler to pass admitted requests to"), onError: m.OnError, problem: m.Problem}
	}
	h := &handler{
		next: next, key: m.KeyFunc, cost: m.Cost, skip: m.Skip, onLimited: m.OnLimited,
		onDecision: m.OnDecision, onError: m.OnError, mode: m.ErrorMode, shadow: m.Shadow,
		now: m.Now, problem: m.Problem, maxDelay: m.MaxDelay, maxWaiting: int64(m.MaxWaiting),
		stopWaiting: m.StopWaiting, waiting: m.Waiting,
	}
	if h.maxWaiting == 0 {
		h.maxWaiting = DefaultMaxWaiting
	}
	if h.waiting == nil {
		h.waiting = new(Waiting)
	}
	if h.key == nil {
		h.key = new(ClientIP).Key
	}
	if h.now == nil {
		h.now = time.Now
	}
	all := append([]Limit{{Limiter: m.Limiter, Quota: m.Quota}}, m.Limits...)
	var last []int
	for i, l := range all {
		e := newEntry(l)
		h.limits = append(h.limits, e)
		if e.refund == nil {
			last = append(last, i)
		} else {
			h.order = append(h.order, i)
		}
	}
	h.order = append(h.order, last...)
	// The limits a cost above their quota is asked of first (see decide): those whose quota is
	// the Limiter's own policy's, which refuse the cost counting nothing, smallest first; then
	// those whose Limiter can give back, smallest first. A Quota.Limit set by hand may be below
	// what its Limiter admits (a tier), so such a limit may admit the cost, or, used up, refuse it
	// with a wait: asked after every limit of its own quota, it gives that wait only where none
	// of them refuses the cost outright.
	for _, i := range h.order {
		if e := &h.limits[i]; e.limit > 0 && (e.ownQuota || e.refund != nil) {
			h.costFirst = append(h.costFirst, i)
		}
	}
	slices.SortStableFunc(h.costFirst, func(a, b int) int {
		ea, eb := &h.limits[a], &h.limits[b]
		if ea.ownQuota != eb.ownQuota {
			if ea.ownQuota {
				return -1
			}
			return 1
		}
		return cmp.Compare(ea.limit, eb.limit)
	})
	var items []string
	for _, e := range h.limits {
		if e.policy != "" {
			items = append(items, e.policy)
		}
	}
	if len(items) > 0 {
		h.policy = []string{strings.Join(items, ", ")}
	}
	return h
}

func newEntry(l Limit) limitEntry {
	q := l.Quota
	ownQuota := false
	if q.Limit == 0 {
		if p, ok := l.Limiter.(policyReporter); ok {
			q, ownQuota = QuotaOf(q.Name, p.Policy()), true
		}
	}
	if q.Name == "" {
		q.Name = "default"
	}
	e := limitEntry{lim: l.Limiter, rawName: q.Name, name: sfString(q.Name), limit: max(q.Limit, 0), ownQuota: ownQuota}
	if p, ok := l.Limiter.(policyReporter); ok {
		e.rate = rules.BucketRate(p.Policy())
	}
	if q.Limit > 0 {
		e.policy = e.name + ";q=" + strconv.FormatInt(q.Limit, 10)
		if q.Window > 0 {
			e.policy += ";w=" + strconv.FormatInt(max(ceilSeconds(q.Window), 1), 10)
		}
	}
	switch r := l.Limiter.(type) {
	case interface{ Engine() *engine.Limiter }:
		eng := r.Engine()
		e.peek = eng.PeekN
		if givesBack(eng.Policy()) {
			e.refund = func(_ context.Context, key string, n int64, d engine.Decision) (int64, error) {
				return eng.Refund(key, n, d), nil
			}
		}
	case refunder:
		// A Limiter that reports a policy whose Refund gives nothing back (redisstore's sliding
		// log and dual bucket) is asked last, as the engine's is, though it has the method.
		if p, ok := l.Limiter.(policyReporter); !ok || givesBack(p.Policy()) {
			e.refund = func(ctx context.Context, key string, n int64, d engine.Decision) (int64, error) {
				return r.Refund(context.WithoutCancel(ctx), key, n, d)
			}
		}
	}
	if p, ok := l.Limiter.(costPeeker); ok && e.peek == nil {
		e.peek = p.PeekN
	} else if p, ok := l.Limiter.(peeker); ok && e.peek == nil {
		e.peek = func(key string, _ int64) engine.Decision { return p.Peek(key) } // a unit's, whatever the cost
	}
	return e
}

// givesBack reports whether a Refund under policy p can give units back: not the sliding log's
// nor the dual bucket's (see engine.Limiter.Refund), in process or on Redis.
func givesBack(p policy.Policy) bool {
	switch v, _ := rules.Value(p); v.(type) {
	case policy.SlidingLog, policy.DualBucket:
		return false
	}
	return true
}

// peeker is what a Limiter other than the engine offers to show a limit that was not asked.
type peeker interface {
	Peek(key string) slidelimit.Decision
}

// costPeeker is peeker for a request of any cost, as the engine's PeekN.
type costPeeker interface {
	PeekN(key string, n int64) slidelimit.Decision
}

// refunder is the method through which a Limiter other than the engine gives units back.
type refunder interface {
	Refund(ctx context.Context, key string, n int64, d slidelimit.Decision) (int64, error)
}

// broken serves a configuration Validate refused.
type broken struct {
	err     error
	onError func(*http.Request, string, error)
	problem bool
}

func (b *broken) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if b.onError != nil {
		b.onError(r, "", b.err)
	}
	// Under an outer middleware that admitted the request, as when a limiter fails closed: the
	// request is not served, so the outer gives its units back, and no field describes it.
	if parent, _ := r.Context().Value(frameKey{}).(*frame); parent != nil {
		parent.giveBack(r)
		delete(w.Header(), hdrRateLimit)
		delete(w.Header(), hdrPolicy)
	}
	if b.problem {
		WriteProblem(w, http.StatusInternalServerError, "rate limiter misconfigured")
		return
	}
	http.Error(w, "rate limiter misconfigured", http.StatusInternalServerError)
}

type limitEntry struct {
	lim     Limiter
	rawName string
	name    string // the name as a structured-field string, quotes included
	policy  string // the RateLimit-Policy item; "": none
	limit   int64  // the quota's limit, as RateLimit-Policy gives it; 0: unknown
	// ownQuota: limit is the Limiter's own policy's, not a Quota.Limit the caller set (which a
	// Limiter may admit more than, as a tier does).
	ownQuota bool
	refund   func(ctx context.Context, key string, n int64, d engine.Decision) (int64, error)
	peek     func(key string, n int64) engine.Decision // what a request of n units would get, counting nothing; nil: unknown
	// rate is the units a second a bucket that gives units back refills at (0 for the windows,
	// whose reset does not move with what they hold): units given back move the time it is full
	// again back by their refill.
	rate int64
}

// standing reads e's limit for key as it stands, counting nothing: Remaining and ResetAt as the
// state stands, and Allowed and RetryAfter for a request of cost units (at least one), so that a
// wait shown to the client is one after which that request, not a unit, would pass (where the
// Limiter has PeekN; one with only Peek is read for a unit). It reports false when the Limiter
// cannot say (it has no Peek) or says nothing of the key: a closed limiter, whose r=0 would tell
// the client a quota is spent that no limiter is counting.
func (e *limitEntry) standing(key string, cost int64) (engine.Decision, bool) {
	if e.peek == nil {
		return engine.Decision{}, false
	}
	n := max(cost, 1)
	d := e.peek(key, n)
	if n > 1 && !d.QuotaKnown() && d.Reason != engine.ReasonClosed {
		// Refused without the key being read (for a cost above what the policy can ever
		// admit, say): no wait is known to help, and the state is read for a unit instead, so
		// that the limit is still shown as it stands.
		u := e.peek(key, 1)
		u.Allowed, u.RetryAfter, u.Reason = false, 0, d.Reason
		d = u
	}
	return d, d.Reason != engine.ReasonClosed
}

type handler struct {
	next       http.Handler
	limits     []limitEntry // in the order the fields list them
	order      []int        // the order they are asked in: those that can give back first
	costFirst  []int        // the limits asked first for a cost above their quota, smallest quota first
	key        func(*http.Request) string
	cost       func(*http.Request) int64
	skip       func(*http.Request) bool
	onLimited  func(http.ResponseWriter, *http.Request, engine.Decision)
	onDecision func(*http.Request, string, engine.Decision)
	onError    func(*http.Request, string, error)
	mode       ErrorMode
	shadow     bool
	problem    bool
	maxDelay   time.Duration
	maxWaiting int64
	waiting    *Waiting // requests waiting under maxDelay now
	// stopWaiting, once closed, ends the waits; nil never does.
	stopWaiting <-chan struct{}
	now         func() time.Time
	policy      []string // this middleware's own RateLimit-Policy value; nil: none
}

// The fields' canonical forms, so that handlers further down find them with Header.Get.
const (
	hdrPolicy     = "Ratelimit-Policy"
	hdrRateLimit  = "Ratelimit"
	hdrRetryAfter = "Retry-After"
)

// entryState is what one request learnt of one limit.
type entryState uint8

const (
	unasked  entryState = iota // not asked: an earlier limit refused
	failed                     // its Limiter failed and the request went on without it
	admitted                   // admitted and counted
	returned                   // admitted, then given back (as far as the Limiter can)
	refused                    // the limit that refused
)

// frame is one middleware's decisions for one request, found by the middlewares below it through
// the request context. It is that context itself, so that passing it on costs no more than the
// request's copy.
type frame struct {
	context.Context
	h      *handler
	parent *frame
	// mu guards st, ds and fallback once the next handler runs: from then on they are read and
	// written only by the middlewares below, which may serve several requests under this one's
	// context at once (a handler fanning a request out).
	mu   sync.Mutex
	key  string
	cost int64
	st   []entryState
	ds   []engine.Decision
	// fallback marks the limits whose Decision came with an error, under FailLocal: made by the
	// Limiter's fallback, on a quota that is not the one RateLimit-Policy advertises. Made on the
	// first such Decision, as a failing store is the rare path.
	fallback []bool
	// kept is set when a limit counted the request and did not give it back (it cannot, or its
	// Refund failed): the units stay counted, so the request must not be decided again after a
	// wait.
	kept bool
	buf  [2]entryState
	dbuf [2]engine.Decision
}

type frameKey struct{}

// handlers counts the handlers Wrap has built, misconfigured ones included. While there is only
// one, no middleware can sit below it, and requests go on without the copy that carrying a frame
// in their context costs.
var handlers atomic.Int64

// pass calls the next handler, with f in the request's context when a middleware below may
// look for it.
func (h *handler) pass(w http.ResponseWriter, r *http.Request, f *frame) {
	if handlers.Load() > 1 {
		r = r.WithContext(f)
	}
	h.next.ServeHTTP(w, r)
}

// Value answers frameKey with the frame, everything else from the request's context.
func (f *frame) Value(key any) any {
	if key == (frameKey{}) {
		return f
	}
	return f.Context.Value(key)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.skip != nil && h.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	f := &frame{Context: r.Context(), h: h, key: h.key(r), cost: 1}
	f.parent, _ = r.Context().Value(frameKey{}).(*frame)
	if h.cost != nil {
		f.cost = h.cost(r)
	}
	if n := len(h.limits); n <= len(f.buf) {
		f.st, f.ds = f.buf[:n], f.dbuf[:n]
	} else {
		f.st, f.ds = make([]entryState, n), make([]engine.Decision, n)
	}

	var deadline time.Time // the end of MaxDelay, from the first refusal that waits
	for {
		d, idx, closed := h.decide(r, f)
		if closed { // never in Shadow mode, where decide fails open instead
			f.parent.giveBack(r)
			// An outer middleware's fields said what it had counted, and it has given that back:
			// no field describes this answer.
			delete(w.Header(), hdrRateLimit)
			delete(w.Header(), hdrPolicy)
			w.Header().Set(hdrRetryAfter, strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10))
			h.writeError(w, http.StatusServiceUnavailable, "rate limiter unavailable", "")
			return
		}
		if idx >= 0 && !h.shadow && d.Reason == engine.ReasonLimited && h.maxDelay > 0 && d.RetryAfter > 0 {
			// The wait includes the limits not asked that are used up for longer: sleeping only the
			// refusing limit's would end in a refusal by the next, after holding the request (and
			// a place among MaxWaiting) for nothing.
			// The bound is on the time that passes, not on the waits asked for: each wait ends
			// late by a timer's slack and a decision, which short waits would add up past it.
			left := h.maxDelay // at the first refusal, none of MaxDelay has passed
			if deadline.IsZero() {
				deadline = time.Now().Add(h.maxDelay)
			} else {
				// Not at the first: measured then, the microseconds since the refusal refused a
				// wait of exactly MaxDelay (GCRA 1/1m's 60s, under a MaxDelay of 1m).
				left = time.Until(deadline)
			}
			// A limit that cannot give back and was counted before the refusal would be counted
			// again by the decision after the wait: such a request is refused at once.
			if wait := h.longestWait(f, d.RetryAfter); wait <= left && !f.kept && !h.stopped() && h.startWaiting() {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
					h.waiting.n.Add(-1)
					f.reset()
					continue
				case <-r.Context().Done():
					h.waiting.n.Add(-1)
					t.Stop()
				case <-h.stopWaiting:
					// Decided again, not refused on the decision from before the wait: its
					// Retry-After and fields would be stale. stopped() keeps it from waiting again.
					h.waiting.n.Add(-1)
					t.Stop()
					f.reset()
					continue
				}
			}
		}
		if h.onDecision != nil && (idx >= 0 || anyDecided(f.st)) {
			h.onDecision(r, f.key, d)
		}
		if idx >= 0 && !h.shadow {
			f.parent.giveBack(r)
		}
		if h.shadow {
			h.pass(w, r, f)
			return
		}
		h.setFields(w.Header(), f, idx)
		if idx < 0 {
			h.pass(w, r, f)
			return
		}
		h.refuse(w, r, d, h.limits[idx].rawName)
		return
	}
}

// stopped reports whether StopWaiting has been closed.
func (h *handler) stopped() bool {
	select {
	case <-h.stopWaiting:
		return true
	default:
		return false
	}
}

// longestWait is the longer of the refusing limit's wait and those of f's limits not asked that
// have too little left for f's cost, as setFields works out Retry-After.
func (h *handler) longestWait(f *frame, wait time.Duration) time.Duration {
	for i, s := range f.st {
		if s != unasked {
			continue
		}
		if d, ok := h.limits[i].standing(f.key, f.cost); ok && !d.Allowed && d.RetryAfter > wait {
			wait = d.RetryAfter
		}
	}
	return wait
}

func anyDecided(st []entryState) bool {
	for _, s := range st {
		if s != unasked && s != failed {
			return true
		}
	}
	return false
}

// decide asks every limit in h.order. It returns the request's Decision and, when a limit
// refused, its index (else -1), having given back what the others counted; closed reports a
// Limiter error under FailClosed (or a closed limiter's under FailLocal), everything given back.
func (h *handler) decide(r *http.Request, f *frame) (d engine.Decision, idx int, closed bool) {
	if f.cost < 0 {
		// The caller's own error, refused by the first limit without asking any Limiter,
		// whatever the error mode: serving it (FailOpen, or a Limiter that admits it) or blaming
		// the limiter (503) would hide the bug, and a Limiter may take a negative cost as units
		// to give back.
		i := h.order[0]
		f.st[i], f.ds[i] = refused, engine.Decision{Limit: h.limits[i].limit, Reason: engine.ReasonNegativeCost}
		return f.ds[i], i, false
	}
	idx = -1
	tightest := -1
	// A cost above a limit's quota is asked of the limits with such quotas first (see
	// costFirst): one refuses for the cost, with no wait, where a used-up limit asked before it
	// would refuse with a wait that admits nothing. Those asked then are not asked again.
	n := len(h.costFirst)
	for k := 0; k < n+len(h.order); k++ {
		var i int
		if k < n {
			if i = h.costFirst[k]; f.cost <= h.limits[i].limit {
				continue
			}
		} else if i = h.order[k-n]; f.st[i] != unasked {
			continue
		}
		e := &h.limits[i]
		di, err := e.lim.Take(r.Context(), f.key, f.cost)
		if err != nil {
			if h.onError != nil {
				h.onError(r, f.key, err)
			}
			// Shadow mode never refuses, so where the mode would answer 503 (FailClosed, or a
			// closed limiter) it fails open; FailLocal's Decision is still the one reported.
			if h.mode == FailOpen || h.shadow && (h.mode == FailClosed || di.Reason == engine.ReasonClosed) {
				f.st[i] = failed
				continue
			}
			if h.mode == FailClosed || di.Reason == engine.ReasonClosed {
				// A closed limiter's Decision, even under FailLocal, says only that it cannot
				// decide: answered as FailClosed answers, with no RateLimit field that would
				// tell the client its quota is spent.
				f.giveBackOwn(r)
				return di, -1, true
			}
			// FailLocal: go on with di, which RateLimit does not list.
			if f.fallback == nil {
				f.fallback = make([]bool, len(f.st))
			}
			f.fallback[i] = true
		}
		f.ds[i] = di
		if !di.Allowed {
			f.st[i] = refused
			f.giveBackOwn(r)
			return di, i, false
		}
		f.st[i] = admitted
		if tightest < 0 || di.Remaining < f.ds[tightest].Remaining {
			tightest = i
		}
	}
	if tightest >= 0 {
		d = f.ds[tightest]
	} else {
		d = engine.Decision{Allowed: true}
	}
	return d, -1, false
}

// reset forgets f's decisions, for a request decided again after its wait.
func (f *frame) reset() {
	clear(f.st)
	clear(f.fallback)
}

// giveBack returns what f and the frames above it counted for r: the request they admitted has
// been refused further down. Nil-safe; each limit is given back once.
func (f *frame) giveBack(r *http.Request) {
	for ; f != nil; f = f.parent {
		f.mu.Lock()
		f.giveBackOwn(r)
		f.mu.Unlock()
	}
}

// giveBackOwn returns what f's own limits counted for r. A Limiter's failure to give back goes to
// f's OnError, as its failures to decide do: the units stay counted, and the operator should know.
func (f *frame) giveBackOwn(r *http.Request) {
	for i, s := range f.st {
		if s != admitted {
			continue
		}
		f.st[i] = returned
		if e := &f.h.limits[i]; e.refund == nil {
			f.kept = true
		} else {
			g, err := e.refund(r.Context(), f.key, f.cost, f.ds[i])
			if err != nil {
				f.kept = true
				if f.h.onError != nil {
					f.h.onError(r, f.key, err)
				}
			}
			// The field then shows what the limit holds again: read back where the Limiter can
			// say so without counting, as a limit not asked is shown, since for a bucket the
			// time it is full again moves back too; else worked out from what came back.
			if p, ok := e.standing(f.key, 1); ok && p.QuotaKnown() {
				f.ds[i].Remaining, f.ds[i].ResetAt = p.Remaining, p.ResetAt
			} else {
				f.ds[i].Remaining = min(f.ds[i].Remaining+g, max(f.ds[i].Limit, f.ds[i].Remaining))
				f.ds[i].ResetAt = rules.FullSooner(f.ds[i].ResetAt, g, e.rate, f.h.now())
			}
		}
	}
}

// setFields writes RateLimit-Policy and RateLimit for f and every frame above it, outermost
// first. refusedIdx is f's refusing limit, or -1.
func (h *handler) setFields(hdr http.Header, f *frame, refusedIdx int) {
	var chain [4]*frame
	frames := chain[:0]
	for g := f; g != nil; g = g.parent {
		if !g.h.shadow {
			frames = append(frames, g)
		}
	}
	now := h.now()
	var pbuf, rbuf [256]byte
	pol, rl := pbuf[:0], rbuf[:0]
	alone := len(frames) == 1 && frames[0] == f
	// Retry-After is the longest wait of the refusing limit and of the limits not asked that are
	// used up too: a client that waits only the first would be refused again by the next.
	var wait time.Duration
	if refusedIdx >= 0 {
		wait = f.ds[refusedIdx].RetryAfter
	}
	for k := len(frames) - 1; k >= 0; k-- {
		g := frames[k]
		if g != f {
			// A frame above, which other requests under its context may be changing.
			g.mu.Lock()
		}
		for i := range g.h.limits {
			e := &g.h.limits[i]
			if e.policy != "" && !alone {
				if len(pol) > 0 {
					pol = append(pol, ", "...)
				}
				pol = append(pol, e.policy...)
			}
			d := g.ds[i]
			if g.fallback != nil && g.fallback[i] {
				// Decided by the Limiter's fallback while its store failed: its Remaining and
				// reset are the fallback's (a share of the limit, a count of this process alone),
				// not the advertised quota's. Retry-After still gives a refusal's wait.
				continue
			}
			switch g.st[i] {
			case failed:
				continue
			case refused:
				if !d.QuotaKnown() {
					// Refused before the policy looked at the key (at the key cap, for a bad
					// cost or limit, for a cost above what it can ever admit): its Remaining of 0
					// would tell the client a quota is spent.
					continue
				}
			case unasked:
				// Not asked, as an earlier limit refused: shown as it stands when the Limiter
				// can say so without counting.
				var ok bool
				if d, ok = e.standing(g.key, g.cost); !ok {
					continue
				}
				if g == f && wait > 0 && !d.Allowed && d.RetryAfter > wait {
					wait = d.RetryAfter
				}
			}
			if len(rl) > 0 {
				rl = append(rl, ", "...)
			}
			rl = append(rl, e.name...)
			rl = append(rl, ";r="...)
			rl = strconv.AppendInt(rl, min(max(d.Remaining, 0), maxSFInteger), 10)
			switch {
			case g == f && i == refusedIdx, g.st[i] == unasked && !d.Allowed && d.RetryAfter > 0:
				// Seconds until the quota is available again, what Retry-After says: the refusing
				// limit's wait, or that of a limit not asked that has too little left for the
				// request's cost.
				if d.RetryAfter > 0 {
					rl = append(rl, ";t="...)
					rl = strconv.AppendInt(rl, max(ceilSeconds(d.RetryAfter), 1), 10)
				}
			case g.st[i] == returned && d.Limit > 0 && d.Remaining >= d.Limit:
				// Given back whole: nothing is used, so nothing waits to reset (rls says the same).
				rl = append(rl, ";t=0"...)
			case !d.ResetAt.IsZero():
				rl = append(rl, ";t="...)
				rl = strconv.AppendInt(rl, ceilSeconds(d.ResetAt.Sub(now)), 10)
			}
		}
		if g != f {
			g.mu.Unlock()
		}
	}
	switch {
	case alone && h.policy != nil:
		// Shared read-only by every response, as the value never changes.
		hdr[hdrPolicy] = h.policy
	case len(pol) > 0:
		hdr[hdrPolicy] = []string{string(pol)}
	default:
		delete(hdr, hdrPolicy)
	}
	if len(rl) > 0 {
		hdr[hdrRateLimit] = []string{string(rl)}
	} else {
		delete(hdr, hdrRateLimit)
	}
	if wait > 0 {
		hdr[hdrRetryAfter] = []string{strconv.FormatInt(max(ceilSeconds(wait), 1), 10)}
	}
}

// refuse answers a refused request; name is the refusing limit's.
func (h *handler) refuse(w http.ResponseWriter, r *http.Request, d engine.Decision, name string) {
	if d.Reason == engine.ReasonKeyCap || d.Reason == engine.ReasonClosed {
		w.Header().Set(hdrRetryAfter, "1")
	}
	if h.onLimited != nil {
		h.onLimited(w, r, d)
		return
	}
	status, detail := http.StatusTooManyRequests, "rate limit exceeded"
	switch d.Reason {
	case engine.ReasonCostAboveLimit:
		detail = "request cost exceeds the limit"
	case engine.ReasonKeyCap:
		status, detail = http.StatusServiceUnavailable, "rate limiter at its key capacity"
	case engine.ReasonClosed:
		// A closed limiter's Decision, trusted under FailLocal: the limiter is unavailable, not
		// the client over its limit.
		status, detail = http.StatusServiceUnavailable, "rate limiter unavailable"
	case engine.ReasonNegativeCost, engine.ReasonInvalidLimit:
		status, detail = http.StatusInternalServerError, "rate limiter: "+d.Reason.String()
	}
	violated := ""
	if d.Reason == engine.ReasonLimited || d.Reason == engine.ReasonCostAboveLimit {
		violated = name
	}
	h.writeError(w, status, detail, violated)
}

// writeError writes a refusal's body: plain text, or with Problem an RFC 9457 object, whose type
// is quota-exceeded when violated names the limit that refused.
func (h *handler) writeError(w http.ResponseWriter, status int, detail, violated string) {
	if !h.problem {
		http.Error(w, detail, status)
		return
	}
	p := problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}
	if violated != "" {
		p.Type = "https://iana.org/assignments/http-problem-types#quota-exceeded"
		p.Violated = []string{violated}
	}
	p.write(w)
}

// WriteProblem answers with an RFC 9457 problem of type "about:blank", as the middleware's
// Problem bodies for its own errors are: for a server that answers its other errors, a proxy's
// 502 say, the same way. It writes the header and the body; call it from any goroutine that
// owns w.
func WriteProblem(w http.ResponseWriter, status int, detail string) {
	problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}.write(w)
}

func (p problem) write(w http.ResponseWriter) {
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}

// maxSFInteger is the largest integer an HTTP structured field can carry (RFC 8941 §3.3.1: 15
// digits); a field with a longer one is invalid as a whole.
const maxSFInteger = 999_999_999_999_999

// problem is an RFC 9457 problem details object.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies,omitempty"`
}

// sfString quotes s as a structured-field string (RFC 8941 §3.3.3): within double quotes,
// backslash and double quote are escaped. s is printable ASCII (Validate checked).
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}

// DefaultMaxWaiting is the number of requests that may wait under Middleware.MaxDelay at once
// when Middleware.MaxWaiting is 0.
const DefaultMaxWaiting = 1024

// Waiting counts requests waiting under Middleware.MaxDelay, for middlewares that share one
// bound (see Middleware.Waiting). The zero value counts none; it must not be copied once used.
// Safe for concurrent use: the middlewares sharing it update it with atomic operations.
type Waiting struct{ n atomic.Int64 }

// Len returns how many requests are waiting. Safe for concurrent use; it may lag waits that are
// starting or ending.
func (w *Waiting) Len() int64 { return w.n.Load() }

// startWaiting takes a place among the requests waiting under maxDelay, if one is free; the
// caller gives it back when its wait ends. A compare-and-swap, not an add taken back when over
// the bound: that would count a refused request as waiting for a moment, so that Len could
// report more than any bound, and a middleware with a higher bound sharing the count could be
// refused while it had room.
func (h *handler) startWaiting() bool {
	for {
		n := h.waiting.n.Load()
		if n >= h.maxWaiting {
			return false
		}
		if h.waiting.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}
