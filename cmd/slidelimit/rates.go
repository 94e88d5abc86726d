package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// rate is one limit as written on the command line or in the config file: limit units per
// window.
type rate struct {
	limit  int64
	window time.Duration
}

// String writes the rate back as -rate takes it, the window in its shortest form: 10/1s, 1000/1h.
func (r rate) String() string { return strconv.FormatInt(r.limit, 10) + "/" + shortDuration(r.window) }

// label is the window alone, for naming one limit among several: 1s, 1h, 1500ms.
func (r rate) label() string { return shortDuration(r.window) }

// shortDuration writes d without the zero parts time.Duration.String adds (1h, not 1h0m0s).
func shortDuration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return d.String()
}

// parseRate parses LIMIT/WINDOW: "10/1s", "1000/1h", "5/90s", and nginx's "10r/s" and "10r/m"
// (a bare unit ms, s, m, h or d means one of it). The error says what to write instead.
func parseRate(s string) (rate, error) {
	num, win, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return rate{}, fmt.Errorf("%q: write LIMIT/WINDOW, like 10/1s, 1000/1h or 10r/m", s)
	}
	num = strings.TrimSuffix(num, "r")
	limit, err := strconv.ParseInt(num, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		limit, err = 0, nil // a whole number past int64: refused below, with the range
	}
	if err != nil {
		return rate{}, fmt.Errorf("%q: the limit %q is not a whole number; write LIMIT/WINDOW, like 10/1s", s, num)
	}
	if limit < 1 || limit > policy.MaxLimit {
		return rate{}, fmt.Errorf("%q: the limit must be in [1, %d]", s, int64(policy.MaxLimit))
	}
	var window time.Duration
	switch win {
	case "ms", "s", "m", "h", "d":
		win = "1" + win
	}
	window, err = parseDuration(win)
	if err != nil {
		return rate{}, fmt.Errorf("%q: the window %v", s, err)
	}
	if err := checkWindow(window); err != nil {
		return rate{}, fmt.Errorf("%q: the window %s: %v", s, win, err)
	}
	return rate{limit, window}, nil
}

// parseDuration is time.ParseDuration with a day unit (1d = 24h) and errors that say what to
// write instead: "60" gets "add a unit, like 60s". A bare 0 is zero, as time.ParseDuration reads
// it: zero needs no unit, and the help of several flags gives 0 as their "off" value.
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New(`"" is empty: write a duration, like 60s`)
	}
	switch s {
	case "0", "+0", "-0":
		return 0, nil
	}
	if bareNumber.MatchString(s) {
		return 0, fmt.Errorf("%s has no unit: add a unit, like %ss", s, s)
	}
	if m := leadingDays.FindStringSubmatch(s); m != nil {
		// Days lead, as the largest unit: 1d, 1.5d, 1d12h. A day is 24 hours, so a number of
		// days is that number of hours, parsed exactly by time.ParseDuration, times 24.
		sign, days, rest := m[1], m[2], m[3]
		if rest != "" && !durationSyntax.MatchString(rest) || strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
			return 0, notADuration(s)
		}
		h, err := time.ParseDuration(days + "h")
		if err != nil || h > math.MaxInt64/24 {
			return 0, durationTooLarge(s)
		}
		d := 24 * h
		if rest != "" {
			r, err := time.ParseDuration(rest)
			if err != nil || r > math.MaxInt64-d {
				return 0, durationTooLarge(s)
			}
			d += r
		}
		if sign == "-" {
			d = -d
		}
		return d, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if durationSyntax.MatchString(s) {
			// time.ParseDuration says "invalid" for a value past its range too.
			return 0, durationTooLarge(s)
		}
		return 0, notADuration(s)
	}
	return d, nil
}

func notADuration(s string) error {
	return fmt.Errorf("%q is not a duration: write a number and a unit (ms, s, m, h, d), like 500ms, 60s or 1h", s)
}

var (
	// durationSyntax matches what time.ParseDuration reads, whatever the size.
	durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)
	// bareNumber is a decimal number with no unit, which a unit would make a duration. Not what
	// strconv.ParseFloat reads: "inf", "NaN" and "1e3" with an s are no durations.
	bareNumber = regexp.MustCompile(`^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)
	// leadingDays is a number of days and what follows it: the sign, the days, the rest.
	leadingDays = regexp.MustCompile(`^([-+]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)d(.*)$`)
)

func durationTooLarge(s string) error {
	return fmt.Errorf("%q is too long: a duration is at most 2562047h (about 292 years)", s)
}

// checkWindow refuses a window the policies cannot hold. The error leaves the value out, so that
// the caller can echo it as the user wrote it.
func checkWindow(w time.Duration) error {
	if w < time.Millisecond || w%time.Millisecond != 0 || w > policy.MaxWindow {
		return fmt.Errorf("must be a whole number of milliseconds in [1ms, %v]", policy.MaxWindow)
	}
	return nil
}

// durationFlag is a flag.Value for a duration with parseDuration's errors. It keeps the value as
// written (see typed), so that a later range error can echo what the user typed (60d) rather than
// Go's form of it (1440h0m0s).
type durationFlag struct {
	d *time.Duration
}

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*f.d = d
	typedDurations.Store(f.d, s)
	return nil
}

// typedDurations holds each duration flag's value as the command line wrote it, by the address
// of the flag's variable, so that an error about the value quotes it as written (90s, not 1m30s).
var typedDurations sync.Map // *time.Duration -> string

// typed returns the duration flag at d as the command line wrote it, or as Go writes d where the
// flag was not given.
func typed(d *time.Duration) string {
	if s, ok := typedDurations.Load(d); ok {
		return s.(string)
	}
	return d.String()
}

// durationVar defines a duration flag read by parseDuration (a day unit, "add a unit" for a bare
// number), as every duration flag of the command is read.
func durationVar(fs *flag.FlagSet, d *time.Duration, name string, def time.Duration, usage string) {
	*d = def
	fs.Var(durationFlag{d: d}, name, usage)
}

// rateFlags is the repeatable -rate flag.
type rateFlags struct{ rates *[]rate }

func (f rateFlags) String() string {
	if f.rates == nil {
		return ""
	}
	var parts []string
	for _, r := range *f.rates {
		parts = append(parts, r.String())
	}
	return strings.Join(parts, " ")
}

func (f rateFlags) Set(s string) error {
	r, err := parseRate(s)
	if err != nil {
		return err
	}
	*f.rates = append(*f.rates, r)
	return nil
}

// listFlag is a comma-separated list flag that may be repeated: the lists add up, as -rate's
// limits do. Go's flag package keeps only a repeated flag's last value, and a second
// -trusted-proxies that dropped the first's ranges would key every client behind those proxies
// as the proxy itself.
type listFlag struct{ list *string }

func (f listFlag) String() string {
	if f.list == nil {
		return ""
	}
	return *f.list
}

func (f listFlag) Set(s string) error {
	if *f.list != "" && s != "" {
		s = *f.list + "," + s
	}
	if s != "" {
		*f.list = s
	}
	return nil
}

// bucketScale is the factor k by which the proxy multiplies costs, limits and rates so that a
// bucket refilling limit units per window (below one unit per second, or not a whole number per
// second) becomes a bucket the policy package can express: Rate = 1000*k*limit/window_ms tokens
// per second, a whole number, and Burst = limit*k. It is the least k that makes every given
// limit (the fleet's and each process's share) whole, so that all of them count in the same
// units. The scaled bucket is the same bucket: the policy's integer arithmetic holds the tokens
// exactly (in thousandths, per ms), so k tokens there are one unit here for every decision,
// remaining count (rounded down), wait and reset time.
func bucketScale(window time.Duration, limits ...int64) (int64, error) {
	ms := window.Milliseconds()
	k := int64(1)
	for _, l := range limits {
		// k*1000*l must be a multiple of ms: k must be a multiple of ms / gcd(1000*l, ms).
		need := ms / gcd(1000*l, ms)
		k = k / gcd(k, need) * need
		if k > policy.MaxLimit {
			return 0, errors.New("no whole tokens-per-second rate expresses it: give a limit that is a multiple of the window's seconds, or use a window policy such as sliding-counter")
		}
	}
	// The factor comes from the limit that is not a multiple of the window's seconds, which may be
	// a process's share of it rather than the limit given: the advice names the one to change.
	multiple := "a limit that is a multiple of the window's seconds"
	if ms/gcd(1000*limits[0], ms) == 1 {
		// The limit alone would need no factor: a share forced it.
		multiple = "a limit whose share for each process (the limit divided by the fleet's size) is a multiple of the window's seconds"
	}
	for _, l := range limits {
		if l*k > policy.MaxLimit {
			return 0, fmt.Errorf("it needs a burst of %d×%d units, above %d (a bucket counts in units %d times smaller, so that it refills a whole number a second): lower the limit, give %s, or use a window policy such as sliding-counter", l, k, int64(policy.MaxLimit), k, multiple)
		}
	}
	return k, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// policyFor builds policy id for limit units per window, in units scaled by k (1 for the window
// policies). The buckets take limit as their burst (or capacity) and refill it over one window.
// Errors leave out the policy and the rate, which the caller names.
func policyFor(id string, limit int64, window time.Duration, k int64) (policy.Policy, error) {
	var p policy.Policy
	switch id {
	case "sliding-counter":
		p = policy.SlidingCounter{Limit: limit, Window: window}
	case "fixed-window":
		p = policy.FixedWindow{Limit: limit, Window: window}
	case "sliding-log":
		p = policy.SlidingLog{Limit: limit, Window: window}
	case "token-bucket", "gcra", "leaky-bucket":
		rate := 1000 * k * limit / window.Milliseconds()
		switch id {
		case "token-bucket":
			p = policy.TokenBucket{Rate: rate, Burst: limit * k}
		case "gcra":
			p = policy.GCRA{Rate: rate, Burst: limit * k}
		default:
			p = policy.LeakyBucket{Rate: rate, Capacity: limit * k}
		}
	default:
		return nil, fmt.Errorf("unknown policy %q; one of %s", id, strings.Join(policyIDs, ", "))
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// isBucket reports whether id refills at a rate (and so may need scaling).
func isBucket(id string) bool { return id == "token-bucket" || id == "gcra" || id == "leaky-bucket" }

// fleetShare is each process's share of limit when fleet processes share it and Redis is down:
// limit/fleet rounded down, so that the fleet together never admits more than limit, and at least
// 1, so that no process refuses everything.
func fleetShare(limit int64, fleet int) int64 {
	if fleet <= 1 {
		return limit
	}
	return max(limit/int64(fleet), 1)
}

// scaled presents a limiter that counts in units k times smaller as one that counts whole
// requests: costs are multiplied by k on the way in, Limit and Remaining divided by k (rounded
// down) on the way out. It is the limiter itself for k = 1. Safe for concurrent use, as the
// limiter it wraps.
type scaled struct {
	lim    slidelimit.Limiter
	k      int64
	eng    *engine.Limiter // the engine, when lim is one: for refunds
	onTake func(time.Duration)
}

func (s *scaled) Take(ctx context.Context, key string, n int64) (slidelimit.Decision, error) {
	start := time.Now()
	cost := n
	if n > 0 {
		cost = n * s.k
		if n > math.MaxInt64/s.k {
			cost = math.MaxInt64
		}
	}
	d, err := s.lim.Take(ctx, key, cost)
	if s.onTake != nil {
		s.onTake(time.Since(start))
	}
	d.Limit /= s.k
	d.Remaining /= s.k
	return d, err
}

// peekable adds the PeekN (and Peek) method through which httplimit lists, in RateLimit and
// Retry-After, an in-process limit that was not asked. The engine peeks for every policy, the sliding log's
// included, though it cannot give units back.
type peekable struct{ *scaled }

// refundable adds the Refund method httplimit gives units back through.
type refundable struct{ peekable }

func (s refundable) Refund(_ context.Context, key string, n int64, d slidelimit.Decision) (int64, error) {
	if n <= 0 || n > math.MaxInt64/s.k {
		return 0, nil
	}
	return s.eng.Refund(key, n*s.k, d) / s.k, nil
}

// PeekN shows the limit as it stands for key, counting nothing, in whole requests: what n requests
// would get, n*k of the engine's units, so that a bucket holding less than k units refuses a
// request with the exact wait for the units missing (the engine's PeekN, by its policy's rule).
func (s peekable) PeekN(key string, n int64) slidelimit.Decision {
	units := n
	if n > 0 {
		units = n * s.k
		if n > math.MaxInt64/s.k {
			units = math.MaxInt64
		}
	}
	d := s.eng.PeekN(key, units)
	d.Limit /= s.k
	d.Remaining /= s.k
	return d
}

// Peek is PeekN for one request.
func (s peekable) Peek(key string) slidelimit.Decision { return s.PeekN(key, 1) }

// canRefund reports whether the engine's Refund gives units back for p (see engine.All).
func canRefund(p policy.Policy) bool {
	switch p.(type) {
	case policy.SlidingLog, policy.DualBucket:
		return false
	}
	return true
}
