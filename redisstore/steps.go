package redisstore

import (
	"fmt"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// MaxTimeMs is the largest time (Unix ms, about the year 37,600) a decision accepts; see the
// exactness proof in scripts.go. A later time makes Take return the failure choice and an error.
const MaxTimeMs = 1 << 50

type kind uint8

const (
	kindSlidingCounter kind = iota
	kindFixedWindow
	kindTokenBucket
	kindGCRA
	kindSlidingLog
	kindLeakyBucket
	kindDualBucket
)

var (
	slidingCounterScript = newScript(slidingCounterLua)
	fixedWindowScript    = newScript(fixedWindowLua)
	tokenBucketScript    = newScript(tokenBucketLua)
	gcraScript           = newScript(gcraLua)
	slidingLogScript     = newScript(slidingLogLua)
	leakyBucketScript    = newScript(leakyBucketLua)
	dualBucketScript     = newScript(dualBucketLua)
)

// algo is one policy's Redis side: its script, its constant arguments (formatted once), and a Go
// replay of the script's step for the deny cache. Immutable after newAlgo.
type algo struct {
	kind   kind
	pol    policy.Policy
	sc     rules.SlidingCounterRule
	limit  int64 // limit, or burst
	w      int64 // window ms (window policies)
	rate   int64 // per second (buckets)
	fillMs int64 // ms for an empty bucket to fill (buckets)
	script *script
	body   string // the script's policy part, for the several-limits script (multiLua)
	argP1  string // limit, or rate
	argP2  string // window ms, or burst
	argTTL string // ttl ms (fixed window: the skew, the script adds the rest of the window)
	argX   string // token bucket: fillMs
	// maxTime is the latest time (ms) accepted: MaxTimeMs.
	maxTime int64
	// tag is the policy's fingerprint in key names (policyTag).
	tag string
	// stateLen is how many integers of state a refusal returns for the deny cache; -1 for the
	// sliding log's variable list of (time, count) pairs, which may be empty (not cached).
	stateLen int
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func newAlgo(p policy.Policy, skewMs int64) (algo, error) {
	p, ok := rules.Value(p)
	if !ok {
		return algo{}, fmt.Errorf("redisstore: policy is nil")
	}
	if err := p.Validate(); err != nil {
		return algo{}, err
	}
	var a algo
	switch p := p.(type) {
	case policy.SlidingCounter:
		a = algo{kind: kindSlidingCounter, sc: rules.SlidingCounter(p).Compile(), limit: p.Limit, w: p.Window.Milliseconds(), script: slidingCounterScript, body: slidingCounterBody}
		// Two whole windows untouched make a state identical to a new key's (docs/design.md ("Eviction")).
		a.argTTL = strconv.FormatInt(2*a.w+skewMs, 10)
	case policy.FixedWindow:
		a = algo{kind: kindFixedWindow, limit: p.Limit, w: p.Window.Milliseconds(), script: fixedWindowScript, body: fixedWindowBody}
		a.argTTL = strconv.FormatInt(skewMs, 10)
	case policy.TokenBucket:
		a = algo{kind: kindTokenBucket, limit: p.Burst, rate: p.Rate, script: tokenBucketScript, body: tokenBucketBody}
	case policy.GCRA:
		a = algo{kind: kindGCRA, limit: p.Burst, rate: p.Rate, script: gcraScript, body: gcraBody}
	case policy.SlidingLog:
		a = algo{kind: kindSlidingLog, limit: p.Limit, w: p.Window.Milliseconds(), script: slidingLogScript, body: slidingLogBody}
		// One window without an admission leaves every entry expired: the log is a new key's.
		a.argTTL = strconv.FormatInt(a.w+skewMs, 10)
	case policy.LeakyBucket:
		a = algo{kind: kindLeakyBucket, limit: p.Capacity, rate: p.Rate, script: leakyBucketScript, body: leakyBucketBody}
	case policy.DualBucket:
		// Costs are tokens, so the limit is the token bucket's; w holds the requests per minute.
		a = algo{kind: kindDualBucket, limit: p.TokensPerMin, w: p.RequestsPerMin, script: dualBucketScript, body: dualBucketBody}
	default:
		return algo{}, fmt.Errorf("redisstore: policy %q (%T) is not available on Redis", p.ID(), p)
	}
	a.pol = p
	a.maxTime = MaxTimeMs
	// Every parameter that gives the stored state its meaning; the kind's ID first.
	a.tag = policyTag(fmt.Sprintf("%s limit=%d window=%dms rate=%d/s", p.ID(), a.limit, a.w, a.rate))
	switch a.kind {
	case kindSlidingLog:
		a.stateLen = -1
	case kindDualBucket:
		a.stateLen = 5
	default:
		a.stateLen = 3
	}
	if a.kind == kindDualBucket {
		a.argP1, a.argP2 = strconv.FormatInt(a.w, 10), strconv.FormatInt(a.limit, 10)
		// After a whole period both buckets are full: the state is a new key's.
		a.argTTL = strconv.FormatInt(rules.DualPeriodMs+skewMs, 10)
	} else if a.rate > 0 {
		// After fillMs without a request a bucket is full again: its state is a new key's.
		a.fillMs = ceilDiv(a.limit*1000, a.rate)
		a.argP1, a.argP2 = strconv.FormatInt(a.rate, 10), strconv.FormatInt(a.limit, 10)
		a.argTTL = strconv.FormatInt(a.fillMs+skewMs, 10)
		a.argX = strconv.FormatInt(a.fillMs, 10)
	} else {
		a.argP1, a.argP2 = strconv.FormatInt(a.limit, 10), strconv.FormatInt(a.w, 10)
	}
	return a, nil
}

func (a *algo) args(now, cost int64) []any {
	return []any{now, a.argP1, a.argP2, cost, a.argTTL, a.argX}
}

// MaxCachedLogLimit is the largest sliding-log limit whose refusals the deny cache remembers:
// the script then returns the whole log, at most this many entries, and the cache keeps it in
// under DenyCacheEntryBytes. Refusals under a larger limit, and those of a key whose log holds more
// than the limit (a larger per-call limit filled it), always go to Redis.
const MaxCachedLogLimit = 32

// refusalShape reports whether res is a well-formed refusal for a, and whether it carries a
// state the deny cache can keep.
func (a *algo) refusalShape(res []int64) (ok, cacheable bool) {
	if len(res) < 6 || res[0] != 0 {
		return false, false
	}
	if a.stateLen >= 0 {
		return len(res) == 6+a.stateLen, a.stateLen > 0 && res[len(res)-1] != -2
	}
	pairs := len(res) - 6
	return pairs%2 == 0 && pairs <= 2*MaxCachedLogLimit, pairs > 0 && res[len(res)-1] != -2
}

// newDenyEntry builds the cache entry of a refusal from its reply (see denyEntryFor).
func (a *algo) newDenyEntry(res []int64, until, off int64) denyEntry {
	e := denyEntry{until: until, off: off}
	if a.kind != kindSlidingLog {
		copy(e.st[:], res[5:len(res)-1])
		return e
	}
	// Rebuilt by pushing each time's units at that time, oldest first: every entry is live at the
	// refusal, so none is dropped on the way, and the ring comes out as the engine's would.
	p := rules.SlidingLog(a.pol.(policy.SlidingLog))
	log := p.Fresh(0)
	for i := 5; i+1 < len(res)-1; i += 2 {
		p.Take(&log, res[i], res[i+1])
	}
	e.log = &log
	return e
}

// replay runs the policy's pure step (the engine's own) on a state the script returned, changing
// nothing. The scripts mirror these steps line for line; the tests compare the two on random
// sequences.
func (a *algo) replay(e denyEntry, now, cost int64) policy.Result {
	st := e.st
	switch a.kind {
	case kindSlidingLog:
		// The cached log is shared by concurrent replays: decide on a copy.
		s := e.log.Clone()
		return rules.SlidingLog(a.pol.(policy.SlidingLog)).Take(&s, now, cost)
	case kindLeakyBucket:
		s := rules.LeakyBucketState{Level: st[0], Credit: st[1], Last: st[2]}
		return rules.LeakyBucket(a.pol.(policy.LeakyBucket)).Take(&s, now, cost)
	case kindDualBucket:
		s := rules.DualBucketState{Requests: st[0], Tokens: st[1], RequestCredit: st[2], TokenCredit: st[3], Last: st[4]}
		return rules.DualBucket(a.pol.(policy.DualBucket)).Take(&s, now, cost)
	case kindSlidingCounter:
		s := rules.SlidingCounterState{Window: st[0], Current: st[1], Previous: st[2]}
		return a.sc.Take(&s, now, cost)
	case kindFixedWindow:
		s := rules.FixedWindowState{Window: st[0], Count: st[1]}
		return rules.FixedWindow{Limit: a.limit, Window: time.Duration(a.w) * time.Millisecond}.Take(&s, now, cost)
	case kindTokenBucket:
		s := rules.TokenBucketState{Tokens: st[0], Credit: st[1], Last: st[2]}
		return rules.TokenBucket{Rate: a.rate, Burst: a.limit}.Take(&s, now, cost)
	default:
		// The engine keeps TAT = ms*rate + remainder modulo 2^64 and reads it only through the lag
		// TAT - now*rate, which for a refused key (0 < lag <= burst*1000 + rate) is exact.
		s := rules.GCRAState{TAT: uint64(st[0])*uint64(a.rate) + uint64(st[1])}
		return rules.GCRA{Rate: a.rate, Burst: a.limit}.Take(&s, now, cost)
	}
}
