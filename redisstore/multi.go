package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// multiDriver decides every limiter's key twice: first with writes turned off, stopping at the
// first refusal, which it returns as {-i, the refusal's values...}; then, every limiter having
// admitted, again with writes on, returning five values per limiter. Nothing changes between the
// two passes (one script runs at a time, and each limiter has its own key), so the second pass
// admits exactly what the first did: all or nothing, in one round trip.
// ARGV: now, then five per limiter: p1, p2, cost, ttl, extra.
const multiDriver = `
local function args(i)
  local b = 1 + (i - 1) * 5
  return {ARGV[1], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]}
end
for i = 1, #KEYS do
  local r = F[i](KEYS[i], args(i))
  if r.err then return r end
  if r[1] == 0 then
    table.insert(r, 1, -i)
    return r
  end
end
dry = false
local out = {}
for i = 1, #KEYS do
  local r = F[i](KEYS[i], args(i))
  if r.err then return r end
  for j = 1, 5 do out[#out + 1] = r[j] end
end
return out
`

// multiLua is the several-limits script for limiters of these policies, in order: each policy's
// body as a function of its key and arguments, and the driver.
func multiLua(algos []*algo) string {
	var b strings.Builder
	b.WriteString(luaLocals + luaNow)
	b.WriteString("local dry = true\nlocal function write(...) if not dry then return call(...) end end\nlocal F = {}\n")
	for i, a := range algos {
		fmt.Fprintf(&b, "F[%d] = function(key, A)\nlocal cost = tonumber(A[4])\n", i+1)
		if a.kind != kindSlidingLog {
			b.WriteString(luaGetState)
		}
		b.WriteString(a.body)
		b.WriteString("\nend\n")
	}
	b.WriteString(multiDriver)
	return b.String()
}

// Multi checks one request against several limiters at once (for example 10 per second and 1,000
// per hour on the same key), all or nothing, in one script run in one round trip: either every
// limiter counts it, or none does. Unlike the engine's Multi, nothing is taken and given back, so
// no concurrent request ever sees a refused request's units, and the buckets lose nothing. Its
// methods are safe for concurrent use.
//
// A Multi is made by All. The zero Multi (and a nil one) holds no limiter and refuses every
// request with ReasonClosed and ErrClosed, as the engine's does: admitting would limit nothing.
// A Multi one of whose limiters is closed refuses every request the same way, the closed
// limiter's limit reported, whatever its cost: Close is checked before the arguments, as Take
// checks it.
type Multi struct {
	ls     []*Limiter
	script *script
	// minLimit is the smallest of the limiters' limits: no All admits a cost above it, so the
	// failure choice refuses such a cost whichever limiter's limit it exceeds.
	minLimit int64
	// least is the first limiter whose limit is minLimit, and leastScript the script over it
	// alone: a cost above minLimit is asked of it only, which refuses it for its cost.
	least       []*Limiter
	leastScript *script
}

// All returns a Multi over ls: at least one, at most 16, all on the same client (one script sees
// all their keys: on a cluster every limiter's key for a subject carries the same hash tag), with
// the same time source (all on the server's time, or all on one clock), and none twice. A Multi
// decides under the first limiter's timeout, circuit breaker and failure choice; the first
// limiter's deny cache answers refusals it knows about without a round trip. Any of the seven policies may
// be combined. All only reads the limiters, and may run concurrently with their use.
func All(ls ...*Limiter) (*Multi, error) {
	if len(ls) == 0 || len(ls) > 16 {
		return nil, fmt.Errorf("redisstore: All: %d limiters, want 1 to 16", len(ls))
	}
	algos := make([]*algo, len(ls))
	seen := map[string]int{}
	for i, l := range ls {
		if l == nil {
			return nil, fmt.Errorf("redisstore: All: limiter %d is nil", i)
		}
		if l.client != ls[0].client {
			return nil, fmt.Errorf("redisstore: All: limiter %d (%s) uses another client than limiter 0 (%s)", i, l.name, ls[0].name)
		}
		if l.cfg.serverTime != ls[0].cfg.serverTime || (!l.cfg.serverTime && l.clk != ls[0].clk) {
			return nil, fmt.Errorf("redisstore: All: limiter %d (%s) keeps time another way than limiter 0 (%s)", i, l.name, ls[0].name)
		}
		id := l.Key("")
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("redisstore: All: limiters %d and %d are the same limit (%s)", j, i, l.name)
		}
		seen[id] = i
		algos[i] = &l.algo
	}
	least := ls[0]
	for _, l := range ls[1:] {
		if l.algo.limit < least.algo.limit {
			least = l
		}
	}
	return &Multi{ls: append([]*Limiter(nil), ls...), script: newScript(multiLua(algos)), minLimit: least.algo.limit,
		least: []*Limiter{least}, leastScript: newScript(multiLua([]*algo{&least.algo}))}, nil
}

// Take decides n units for key against every limiter, all or nothing. Admitted, it returns the
// decision of the limiter with the least Remaining (the tightest); refused, the decision of the
// first limiter, in order, that refuses, and nothing was counted anywhere. A cost above the
// smallest of the limiters' limits is asked of that limiter alone (the first of them, if several
// share it), which refuses it with ReasonCostAboveLimit and no RetryAfter, whatever the others
// hold: no wait admits it. When Redis does not decide, it returns the first limiter's failure
// choice with an error wrapping ErrUnavailable, as Take does; a cost above that smallest limit is
// then refused with ReasonCostAboveLimit and that limit (FailLocal's fallback is not asked), and
// FailOpen's admissions report that limit too. A ctx
// done on entry is returned as ctx's error, as Take returns it, before the deny cache, the
// breaker or the clock's range is consulted. Safe for
// concurrent use; concurrent calls for one key are made atomic by Redis, which runs one script
// at a time.
func (m *Multi) Take(ctx context.Context, key string, n int64) (engine.Decision, error) {
	if m == nil || len(m.ls) == 0 {
		return engine.Decision{Reason: engine.ReasonClosed}, ErrClosed
	}
	l0 := m.ls[0]
	for _, l := range m.ls {
		l.calls.Inc()
	}
	if l0.closed.Load() {
		return engine.Decision{Limit: l0.algo.limit, Reason: engine.ReasonClosed}, ErrClosed
	}
	for _, l := range m.ls {
		if l.closed.Load() {
			return engine.Decision{Limit: l.algo.limit, Reason: engine.ReasonClosed}, ErrClosed
		}
	}
	if n < 0 {
		return engine.Decision{Limit: l0.algo.limit, Reason: engine.ReasonNegativeCost}, nil
	}
	local := l0.clk.Refresh() // as in Limiter.Take: the deny cache's bound needs a fresh reading
	if least := m.least[0]; least.algo.kind == kindGCRA && n > least.algo.limit {
		// GCRA refuses a cost above its burst before reading the key; the smallest limit is the
		// one asked for such a cost (see below), as in the engine's Multi.
		return gcraOverBurst(least), nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		// Where Take looks: before the deny cache, the breaker and the clock's range, so that a
		// caller that has given up gets its own error, whatever any of them would have said.
		return l0.fail(key, n, m.minLimit, l0.br.wait(), fmt.Errorf("redisstore: %w", err))
	}
	// The offset is 0 under client time.
	if now := local + l0.offset.Load(); now < 0 || now > MaxTimeMs {
		return l0.fail(key, n, m.minLimit, l0.br.wait(), fmt.Errorf("%w: redisstore: time %d ms outside [0, %d]", ErrUnavailable, now, int64(MaxTimeMs)))
	}
	ls, script := m.ls, m.script
	if n > m.minLimit {
		// No wait admits it, whatever the limiters hold: the smallest limit alone is asked, as in
		// the engine's Multi, rather than an earlier limiter's refusal with a wait answering.
		ls, script = m.least, m.leastScript
	}
	sub := shortSubject(key)
	// A refusal known here decides only for the first limiter: a later one's would leave open
	// whether an earlier one refuses first, which only Redis knows (the deny cache knows refusals,
	// never admissions).
	if cost := min(n, l0.algo.limit+1); ls[0] == l0 && l0.deny != nil && (cost > 0 || l0.algo.kind == kindDualBucket) {
		if e, ok := l0.deny.get(sub, local); ok {
			if r := l0.algo.replay(e, local+e.off, cost); !r.Allowed {
				l0.denyHits.Inc()
				return l0.decision(r, cost, l0.algo.limit), nil
			}
		}
	}
	argNow := local
	if l0.cfg.serverTime {
		argNow = -1
	}
	keys := make([]string, len(ls))
	args := make([]any, 0, 1+5*len(ls))
	args = append(args, argNow)
	for i, l := range ls {
		keys[i] = l.redisKey(sub)
		a := l.algo.args(argNow, min(n, l.algo.limit+1))
		args = append(args, a[1:]...)
	}
	versions := make([]uint64, len(ls))
	for i, l := range ls {
		if l.deny != nil {
			versions[i] = l.deny.version(sub)
		}
	}
	res, wait, err := l0.eval(ctx, script, keys, args)
	if err == nil {
		err = checkReply(ls, res)
	}
	if err != nil {
		return l0.fail(key, n, m.minLimit, wait, err)
	}
	if l0.cfg.serverTime {
		at := res[4] // the first limiter's "now", or the refusal's
		if res[0] < 0 {
			at = res[5]
		}
		l0.offset.Store(at - local)
	}
	if res[0] < 0 {
		i := int(-res[0]) - 1
		l, r := ls[i], res[1:]
		if l.algo.kind == kindGCRA && n > l.algo.limit {
			return gcraOverBurst(l), nil
		}
		cost := min(n, l.algo.limit+1)
		pr := policy.Result{Limit: l.algo.limit, Remaining: r[1], RetryAfterMs: r[2], ResetAtMs: r[3]}
		if _, cacheable := l.algo.refusalShape(r); l.deny != nil && pr.RetryAfterMs > 0 && cacheable {
			l.deny.put(sub, l.denyEntryFor(r, local, pr.RetryAfterMs), local, versions[i])
		}
		return l.decision(pr, cost, l.algo.limit), nil
	}
	var tightest engine.Decision
	for i, l := range ls {
		r := res[5*i : 5*i+5]
		cost := min(n, l.algo.limit+1)
		d := l.decision(policy.Result{Allowed: true, Limit: l.algo.limit, Remaining: r[1], ResetAtMs: r[3]}, cost, l.algo.limit)
		if l.deny != nil {
			l.deny.forget(sub)
		}
		if i == 0 || d.Remaining < tightest.Remaining {
			tightest = d
		}
	}
	return tightest, nil
}

// gcraOverBurst is GCRA's refusal of a cost above its burst, made before any lookup.
func gcraOverBurst(l *Limiter) engine.Decision {
	return engine.Decision{Limit: l.algo.limit, Reason: engine.ReasonCostAboveLimit}
}

// checkReply validates the shape of the reply of the script over ls.
func checkReply(ls []*Limiter, res []int64) error {
	if len(res) > 0 && res[0] < 0 {
		if i := -res[0]; i <= int64(len(ls)) {
			if ok, _ := ls[i-1].algo.refusalShape(res[1:]); ok {
				return nil
			}
		}
	} else if len(res) == 5*len(ls) {
		ok := true
		for i := range ls {
			ok = ok && res[5*i] == 1
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("%w: %w: %v", ErrUnavailable, errMultiReply, res)
}

var errMultiReply = errors.New("redisstore: malformed reply from the several-limits script")
