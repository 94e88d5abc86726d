package redisstore

import (
	"context"
	"fmt"

	"github.com/slidelimit/slidelimit/engine"
)

// The refund scripts mirror internal/rules' Refund for each policy that gives units back
// exactly: they bring the state to now as the take scripts do, take out what leaves it exactly as
// if the request had cost that much less, and store it with its TTL unchanged. A missing key has
// nothing to give back and is not created. Each returns {given}.
// ARGV: now, p1, p2 (as the take script's), cost, resetAt ms, fill or drain ms, gcd(rate, 1000).

const luaRefundable = `
-- refundable: how many of cost units a bucket can give back exactly at its state's time t.
local function refundable(rate, fill, resetAt, t, cost, q)
  local span = resetAt - t - 1
  if span < 0 or cost <= 0 then return 0 end
  if span > fill then span = fill end
  local g = floor((rate * span + q) / 1000)
  if g > cost then g = cost end
  return g
end
`

const slidingCounterRefundLua = luaPrelude + `
if not v then return {0} end
local w = tonumber(A[3])
local win, cur, prev = s1, s2, s3
local start = now - now % w
if start > win then
  if start == win + w then prev = cur else prev = 0 end
  cur, win = 0, start
end
local resetAt, g = tonumber(A[5]), 0
if resetAt - w == win then
  g = math.min(cost, cur)
  cur = cur - g
elseif resetAt - w == win - w then
  g = math.min(cost, prev)
  prev = prev - g
end
if g > 0 then call('SET', key, fmt('%d %d %d', win, cur, prev), 'KEEPTTL') end
return {g}
`

const fixedWindowRefundLua = luaPrelude + `
if not v then return {0} end
local w = tonumber(A[3])
local win, count = s1, s2
if now >= win + w then win, count = now - now % w, 0 end
if tonumber(A[5]) ~= win + w then return {0} end
local g = math.min(cost, count)
if g > 0 then call('SET', key, fmt('%d %d', win, count - g), 'KEEPTTL') end
return {g}
`

const tokenBucketRefundLua = luaPrelude + luaRefundable + `
if not v then return {0} end
local rate, burst, fill = tonumber(A[2]), tonumber(A[3]), tonumber(A[6])
local tokens, credit, last = s1, s2, s3
local dt = now - last
if dt > 0 then
  if dt > fill then dt = fill end
  local c = credit + rate * dt
  local r = c % 1000
  tokens, credit, last = tokens + (c - r) / 1000, r, now
  if tokens >= burst then tokens, credit = burst, 0 end
end
local g = refundable(rate, fill, tonumber(A[5]), last, cost, tonumber(A[7]))
local room = floor((burst * 1000 - tokens * 1000 - credit) / 1000)
if g > room then g = room end
if g <= 0 then return {0} end
call('SET', key, fmt('%d %d %d', tokens + g, credit, last), 'KEEPTTL')
return {g}
`

const gcraRefundLua = luaPrelude + luaRefundable + `
if not v then return {0} end
local rate, burst, fill = tonumber(A[2]), tonumber(A[3]), tonumber(A[6])
local tm, tr = s1, s2
-- lag = tat - now*rate; a state behind now has none to give back, and one further ahead than
-- any admission leaves is not one this limiter wrote.
if tm < now or tm - now > floor(burst * 1000 / rate) + 1 then return {0} end
local lag = (tm - now) * rate + tr
local g = refundable(rate, fill, tonumber(A[5]), now, cost, tonumber(A[7]))
if g > floor(lag / 1000) then g = floor(lag / 1000) end
if g <= 0 then return {0} end
local total = lag - g * 1000
local r = total % rate
call('SET', key, fmt('%d %d', now + (total - r) / rate, r), 'KEEPTTL')
return {g}
`

const leakyBucketRefundLua = luaPrelude + luaRefundable + `
if not v then return {0} end
local rate, drain = tonumber(A[2]), tonumber(A[6])
local level, credit, last = s1, s2, s3
local dt = now - last
if dt > 0 then
  if dt > drain then dt = drain end
  local c = credit + rate * dt
  local r = c % 1000
  local drained = (c - r) / 1000
  if drained >= level then level, credit = 0, 0 else level, credit = level - drained, r end
  last = now
end
local g = refundable(rate, drain, tonumber(A[5]), last, cost, tonumber(A[7]))
local water = floor((level * 1000 - credit) / 1000)
if g > water then g = water end
if g <= 0 then return {0} end
call('SET', key, fmt('%d %d %d', level - g, credit, last), 'KEEPTTL')
return {g}
`

var refundScripts = map[kind]*script{
	kindSlidingCounter: newScript(slidingCounterRefundLua),
	kindFixedWindow:    newScript(fixedWindowRefundLua),
	kindTokenBucket:    newScript(tokenBucketRefundLua),
	kindGCRA:           newScript(gcraRefundLua),
	kindLeakyBucket:    newScript(leakyBucketRefundLua),
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Refund gives back up to n units that the admitted Decision d (from Take or TakeWithLimit on
// this limiter, for key) counted, for a request that then failed upstream, and returns how many
// it gave back, never more than min(n, d.Counted): exactly what the engine's Refund would give
// for the same state and time (see engine.Limiter.Refund for the rule per policy), so that the
// key is left as if the request had cost that much less. It gives back 0 for a refused d, n <= 0,
// a key Redis no longer holds, and the sliding log and dual bucket, which cannot give units back
// exactly. One round trip under the breaker and the limiter's timeout, like Take; when Redis does
// not answer it reports nothing given back and returns an error wrapping ErrUnavailable (or the
// caller's context error): a server that stalls may still run it once it resumes, and give the
// units back then. It forgets key in the local deny cache. Safe for concurrent use.
//
// A Decision the failure mode made (FailOpen's admission, FailLocal's in-process fallback)
// counted nothing on Redis and reports Counted 0, so it gives nothing back: a unit the fallback
// counted stays counted there until its window or bucket lets it go.
//
// As with the engine's Refund, a Decision is a plain value: a second refund of the same d cannot
// be told from the first, each call is bounded by d.Counted on its own, and k refunds of one d
// (concurrent or not) give back at most k*d.Counted in all, never more than the key still holds.
// Refund each decision once. A bucket's refund is exact under the engine's conditions (see
// engine.Limiter.Refund: not after a refund of an earlier request of the key that came after d's
// admission), and, under client time (WithClientTime, WithClock), when the caller's clock is not
// behind that of an admission Redis ran first (GCRA's state keeps no time to order them by).
func (l *Limiter) Refund(ctx context.Context, key string, n int64, d engine.Decision) (int64, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	if ctx == nil {
		ctx = context.Background()
	}
	s, ok := refundScripts[l.algo.kind]
	// A decision counts what it admitted on Redis (Counted); one decided by the failure mode
	// (FailOpen's admission, FailLocal's fallback) counted nothing there, reports Counted 0, and
	// so gives nothing back.
	n = min(n, d.Counted)
	if !ok || !d.Allowed || n <= 0 {
		return 0, nil
	}
	sub := shortSubject(key)
	if l.deny != nil {
		l.deny.forget(sub)
	}
	now := l.clk.Refresh()
	if l.cfg.serverTime {
		now = -1
	}
	// Clamped as Take clamps: a refund never gives back more than a take can count.
	cost := min(n, policy32)
	args := l.algo.args(now, cost)
	args = append(args[:4], d.ResetAt.UnixMilli(), l.algo.fillMs, gcd(max(l.algo.rate, 1), 1000))
	res, _, err := l.eval(ctx, s, []string{l.redisKey(sub)}, args)
	if l.deny != nil {
		// Also after an error: the script may have run even if its reply was lost.
		l.deny.gaveBackTo(sub)
	}
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("%w: redisstore: refund script returned %v, want 1 value", ErrUnavailable, res)
	}
	if err != nil {
		return 0, err
	}
	return res[0], nil
}

// policy32 bounds a refund's cost like the scripts' other numbers (limits are below 2^32).
const policy32 = 1 << 32
