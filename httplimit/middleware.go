package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
)

// ErrorMode says what the middleware (or the Listener) does with a request (or a connection) when
// the Limiter returns an error: the root package's FailureMode. FailOpen (the default) serves the
// request as if it were admitted, without a RateLimit field, after calling OnError. FailClosed
// answers 503 Service Unavailable with Retry-After (the Decision's RetryAfter rounded up, at least
// 1 second), after calling OnError. FailLocal (TrustDecision) uses the Decision returned with the
// error as if there had been no error, after calling OnError: right for a Limiter that decides
// something sensible itself when its store fails, such as redisstore with a fallback limiter.
type ErrorMode = slidelimit.FailureMode

// The error modes, as in the root package.
const (
	FailOpen   = slidelimit.FailOpen
	FailClosed = slidelimit.FailClosed
	FailLocal  = slidelimit.FailLocal
	// TrustDecision is FailLocal's earlier name.
	TrustDecision = slidelimit.FailLocal
)

// Middleware limits the requests that reach a handler. Fill in the fields, then call Wrap; every
// field but Limiter may be left zero, and a nil hook means the default its comment states.
//
// For each request Wrap's handler computes a key (KeyFunc) and a cost (Cost), asks the Limiter
// for that many units, and then:
//   - admitted: sets RateLimit-Policy and RateLimit and calls the next handler;
//   - refused: sets those fields and Retry-After, and calls OnLimited (429 by default);
//   - the Limiter failed: calls OnError and does what ErrorMode says (serve, by default).
//
// In Shadow mode every request is decided, counted and reported to OnDecision, but every request
// reaches the next handler and no field is added: the response is exactly what it would be
// without the limiter, so that clients which honour RateLimit cannot throttle themselves on a
// limit that is only being tried out.
//
// Wrap reads the fields once; changing them afterwards does not affect handlers already returned.
// The handler is safe for concurrent use, and calls the hooks from the goroutines that serve the
// requests, possibly many at once: hooks must be safe for concurrent use themselves.
type Middleware struct {
	// Limiter decides. Required.
	Limiter Limiter

	// Quota is what the RateLimit-Policy field advertises, and its Name names the policy in the
	// RateLimit field. A zero Limit means: derive it (with QuotaOf) from the Limiter's policy when
	// the Limiter reports one (Local and redisstore do), else send no RateLimit-Policy field. An
	// empty Name means "default".
	Quota Quota

	// KeyFunc returns the key a request is limited by. nil means the peer's IP address
	// ((*ClientIP).Key with no trusted proxies). See ClientIP, KeyByHeader, KeyByPathAndIP and
	// KeyByConn.
	KeyFunc func(r *http.Request) string

	// Cost returns how many units a request takes. nil means 1 for every request.
	Cost func(r *http.Request) int64

	// OnLimited writes the response to a refused request; Retry-After, RateLimit-Policy and
	// RateLimit are already set on w's header. nil means 429 Too Many Requests with a short plain
	// text body.
	OnLimited func(w http.ResponseWriter, r *http.Request, d engine.Decision)

	// OnDecision observes every decision the Limiter made (admitted or refused, in Shadow mode
	// too), for metrics and logs, before the response is written. nil means none.
	OnDecision func(r *http.Request, key string, d engine.Decision)

	// OnError observes every error from the Limiter, before ErrorMode is applied. nil means none.
	OnError func(r *http.Request, key string, err error)

	// ErrorMode is what happens to a request when the Limiter returns an error (default
	// FailOpen).
	ErrorMode ErrorMode

	// Shadow decides and reports without ever refusing a request or adding a field.
	Shadow bool

	// Now is the time against which the RateLimit field's t (seconds until the quota resets) is
	// computed. nil means time.Now; tests driving the engine with a manual clock pass a reading
	// of that clock.
	Now func() time.Time
}

// Validate reports a configuration that Wrap would refuse: a nil Limiter, a Quota.Name with
// characters an HTTP structured-field string cannot hold, a negative Quota, or an unknown
// ErrorMode. The error names the field and the value.
func (m *Middleware) Validate() error {
	if m.Limiter == nil {
		return errors.New("httplimit: Middleware.Limiter is nil")
	}
	for i := 0; i < len(m.Quota.Name); i++ {
		if c := m.Quota.Name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("httplimit: Middleware.Quota.Name = %q: only printable ASCII is allowed", m.Quota.Name)
		}
	}
	if m.Quota.Limit < 0 || m.Quota.Window < 0 {
		return fmt.Errorf("httplimit: Middleware.Quota = {Limit: %d, Window: %v}: must not be negative", m.Quota.Limit, m.Quota.Window)
	}
	if m.ErrorMode > TrustDecision {
		return fmt.Errorf("httplimit: Middleware.ErrorMode = %d: unknown mode", m.ErrorMode)
	}
	return nil
}

// Wrap returns a handler that limits the requests reaching next. It panics with Validate's error
// on a configuration Validate refuses: that is a programming error, found at start-up.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	if err := m.Validate(); err != nil {
		panic(err)
	}
	h := &handler{
		next: next, lim: m.Limiter, key: m.KeyFunc, cost: m.Cost, onLimited: m.OnLimited,
		onDecision: m.OnDecision, onError: m.OnError, mode: m.ErrorMode, shadow: m.Shadow, now: m.Now,
	}
	if h.key == nil {
		h.key = new(ClientIP).Key
	}
	if h.now == nil {
		h.now = time.Now
	}
	q := m.Quota
	if q.Limit == 0 {
		if p, ok := m.Limiter.(policyReporter); ok {
			q = QuotaOf(q.Name, p.Policy())
		}
	}
	if q.Name == "" {
		q.Name = "default"
	}
	h.name = sfString(q.Name)
	if q.Limit > 0 {
		v := h.name + ";q=" + strconv.FormatInt(q.Limit, 10)
		if q.Window > 0 {
			v += ";w=" + strconv.FormatInt(max(ceilSeconds(q.Window), 1), 10)
		}
		h.policy = []string{v}
	}
	return h
}

type handler struct {
	next       http.Handler
	lim        Limiter
	key        func(*http.Request) string
	cost       func(*http.Request) int64
	onLimited  func(http.ResponseWriter, *http.Request, engine.Decision)
	onDecision func(*http.Request, string, engine.Decision)
	onError    func(*http.Request, string, error)
	mode       ErrorMode
	shadow     bool
	now        func() time.Time
	name       string   // the policy name as a structured-field string, quotes included
	policy     []string // the RateLimit-Policy value, shared read-only by every response; nil: none
}

// The fields' canonical forms, so that handlers further down find them with Header.Get.
const (
	hdrPolicy     = "Ratelimit-Policy"
	hdrRateLimit  = "Ratelimit"
	hdrRetryAfter = "Retry-After"
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := h.key(r)
	cost := int64(1)
	if h.cost != nil {
		cost = h.cost(r)
	}
	d, err := h.lim.Take(r.Context(), key, cost)
	if err != nil {
		if h.onError != nil {
			h.onError(r, key, err)
		}
		switch {
		case h.shadow || h.mode == FailOpen:
			if !h.shadow && h.policy != nil {
				w.Header()[hdrPolicy] = h.policy
			}
			h.next.ServeHTTP(w, r)
			return
		case h.mode == FailClosed:
			w.Header().Set(hdrRetryAfter, strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10))
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		// TrustDecision: go on with d.
	}
	if h.onDecision != nil {
		h.onDecision(r, key, d)
	}
	if h.shadow {
		h.next.ServeHTTP(w, r)
		return
	}
	hdr := w.Header()
	if h.policy != nil {
		hdr[hdrPolicy] = h.policy
	}
	hdr.Set(hdrRateLimit, h.rateLimit(d))
	if d.Allowed {
		h.next.ServeHTTP(w, r)
		return
	}
	hdr.Set(hdrRetryAfter, strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10))
	if h.onLimited != nil {
		h.onLimited(w, r, d)
		return
	}
	http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
}

// rateLimit formats the RateLimit field: `"name";r=remaining;t=seconds-until-reset`, t rounded
// up and left out when the Decision has no reset time.
func (h *handler) rateLimit(d engine.Decision) string {
	var buf [96]byte
	b := append(buf[:0], h.name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
	if !d.ResetAt.IsZero() {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(d.ResetAt.Sub(h.now())), 10)
	}
	return string(b)
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
