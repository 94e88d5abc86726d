package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/go-redis/v9"
)

// Every script takes one key and ARGV = now, limit (or rate), window (or burst), cost, ttl, extra.
// It returns five integers when it admits — allowed (1), remaining, retry-after ms (0), reset-at
// ms, the now it decided at — and nine when it refuses: the same five, the key's state as stored
// (three integers), so that the local deny cache can replay the key's next requests on exactly
// what Redis holds, without a round trip, and the key's PTTL (-2 when there is no key), so that
// the deny cache never remembers a refusal longer than Redis remembers the state behind it. A refused request writes nothing, and so does
// cost 0: rolling a state forward is invisible to every later decision, so it need not be stored.
//
// Exactness. Lua numbers in Redis (and Valkey) are IEEE doubles, exact for integers below 2^53.
// The Go side admits only: now in [0, 2^50] ms; limits, bursts and rates in [1, 2^32-1]; windows
// in [1, 2^32] ms; costs clamped to [0, limit+1] (any cost above the limit decides the same way);
// ttl below 2^44. Under these bounds every value a script forms stays below 2^52:
//   - Floor division: for integers a >= 0 and b >= 1 with a + b < 2^53, floor(a/b) on doubles is
//     exact. Let k = floor(a/b) + 1; then a/b <= k - 1/b, and rounding to nearest could only reach
//     k if 1/b were at most half an ulp of k, 1/b <= k*2^-53, that is k*b >= 2^53; but
//     k*b <= a + b < 2^53. So Lua's a % b = a - floor(a/b)*b is exact too. (For -b < a < 0 the
//     quotient lies in (-1, 0) and floors to -1, as it should.)
//   - muldiv(a, b, c) = floor(a*b/c) for 0 <= a, b <= 2^33 and 1 <= c <= 2^33, without forming a*b
//     (up to 2^66): with b = bh*2^16 + bl, a*bh < 2^50 gives q1, r1 < c; then r1*2^16 + a*bl < 2^50
//     gives q2, and floor(a*b/c) = q1*2^16 + q2. This is the engine's uint64 product
//     previous*(W - elapsed) and W*excess of the sliding counter, exact for every accepted limit
//     and window.
//   - Token bucket: credit <= 999 + rate*fillMs <= 999 + burst*1000 + rate < 2^43 (dt is clamped to
//     fillMs first), tokens <= burst < 2^32.
//   - GCRA keeps the theoretical arrival time as (ms, remainder < rate) instead of the engine's
//     now*rate units (up to 2^82, which the engine keeps modulo 2^64): tat - now*rate is formed
//     only when tat's ms part is at most L/rate ahead of now, L <= burst*1000 < 2^42, so it stays
//     below 2^43; past that the comparison is decided without the product.
//
// Numbers are stored with string.format('%d'), never tostring, which keeps only 14 digits.
// Globals are read once into locals: in Redis 7 every global read goes through the sandbox's
// metatable, and the scripts' cost on the server is what bounds a fleet's decisions per second.
const luaLocals = `
local call, tonumber, floor, fmt, match = redis.call, tonumber, math.floor, string.format, string.match
`

// luaNow is the decision's time: ARGV[1], or the server's clock when that is negative.
const luaNow = `
local now = tonumber(ARGV[1])
if now < 0 then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end
`

// luaHeader opens a single-key take script. The policy bodies write through write, which is
// call here and, in the several-limits script (multiLua), a no-op during its first, deciding pass.
const luaHeader = luaLocals + luaNow + `
local A, key = ARGV, KEYS[1]
local cost = tonumber(A[4])
local write = call
`

// luaGetState reads a state stored as up to five integers separated by spaces into s1 … s5.
const luaGetState = `
local v = call('GET', key)
local s1, s2, s3, s4, s5
if v then
  s1, s2, s3, s4, s5 = match(v, '^(%-?%d+) (%-?%d+) ?(%-?%d*) ?(%-?%d*) ?(%-?%d*)$')
  if not s1 then return redis.error_reply('redisstore: malformed state at ' .. key) end
  s1, s2, s3, s4, s5 = tonumber(s1), tonumber(s2), tonumber(s3) or 0, tonumber(s4) or 0, tonumber(s5) or 0
end
`

const luaPrelude = luaHeader + luaGetState

// slidingCounterLua mirrors rules.SlidingCounter.Take (docs/policies.md ("Sliding window counter"))
// line for line. ARGV: now, limit, windowMs, cost, ttlMs.
const slidingCounterBody = `
local limit, w = tonumber(A[2]), tonumber(A[3])
local start = now - now % w
local win, cur, prev = start, 0, 0
if v then win, cur, prev = s1, s2, s3 end
if start > win then
  if start == win + w then prev = cur else prev = 0 end
  cur = 0
  win = start
end
local elapsed = now - win
-- signed: a state a racing writer moved ahead of now also makes the wait cover the gap
local since = elapsed
if elapsed < 0 then elapsed = 0 end
local est = cur
if prev > 0 then
  -- muldiv(prev, w - elapsed, w), inline: a closure per call costs more than the arithmetic.
  local b = w - elapsed
  local bl = b % 65536
  local x = prev * ((b - bl) / 65536)
  local r1 = x % w
  est = (x - r1) / w * 65536 + floor((r1 * 65536 + prev * bl) / w) + cur
end
if cost == 0 or (cost <= limit and est + cost <= limit) then
  if cost > 0 then
    write('SET', key, fmt('%d %d %d', win, cur + cost, prev), 'PX', A[5])
  end
  local remaining = limit - est - cost
  if remaining < 0 then remaining = 0 end
  return {1, remaining, 0, win + w, now}
end
local remaining, retry = limit - est, 0
if remaining < 0 then remaining = 0 end
local function muldiv(a, b, c)
  local bl = b % 65536
  local x = a * ((b - bl) / 65536)
  local r1 = x % c
  return (x - r1) / c * 65536 + floor((r1 * 65536 + a * bl) / c)
end
if cost <= limit then
  local need = limit - cur - cost
  if need < 0 then
    local wait = 1
    local excess = cur - (limit - cost) - 1
    if excess >= 0 then wait = muldiv(w, excess, cur) + 1 end
    retry = w - since + wait
  elseif prev > 0 then
    local excess = prev - need - 1
    if excess >= 0 then
      retry = muldiv(w, excess, prev) + 1 - since
      if retry < 0 then retry = 0 end
    end
  end
end
if v then return {0, remaining, retry, win + w, now, s1, s2, s3, call('PTTL', key)} end
return {0, remaining, retry, win + w, now, start, 0, 0, -2}
`

const slidingCounterLua = luaPrelude + slidingCounterBody

// fixedWindowLua mirrors rules.FixedWindow.Take: a state from a later window than now's is kept,
// with now counted as that window's first millisecond. ARGV: now, limit, windowMs, cost, skewMs.
const fixedWindowBody = `
local limit, w = tonumber(A[2]), tonumber(A[3])
local win, count = now - now % w, 0
if v and s1 >= win then win, count = s1, s2 end
-- As the engine: cost 0 too is refused while the count is above the limit (a lowered per-call
-- limit), and waits for the window's end.
if cost <= limit and count + cost <= limit then
  if cost > 0 then
    count = count + cost
    write('SET', key, fmt('%d %d', win, count), 'PX', fmt('%d', win + w - now + tonumber(A[5])))
  end
  return {1, limit - count, 0, win + w, now}
end
local retry = 0
if cost <= limit then retry = win + w - now end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
if v then return {0, remaining, retry, win + w, now, s1, s2, 0, call('PTTL', key)} end
return {0, remaining, retry, win + w, now, win, 0, 0, -2}
`

const fixedWindowLua = luaPrelude + fixedWindowBody

// tokenBucketLua mirrors rules.TokenBucket.Take; waits count from the later of now and the
// state's last refill. ARGV: now, ratePerSec, burst, cost, ttlMs, fillMs.
const tokenBucketBody = `
local rate, burst = tonumber(A[2]), tonumber(A[3])
local tokens, credit, last = burst, 0, now
if v then tokens, credit, last = s1, s2, s3 end
local dt = now - last
if dt > 0 then
  local fill = tonumber(A[6])
  if dt > fill then dt = fill end
  local c = credit + rate * dt
  local r = c % 1000
  tokens, credit, last = tokens + (c - r) / 1000, r, now
  if tokens >= burst then tokens, credit = burst, 0 end
end
local base = now
if last > now then base = last end
local reset = base
if tokens < burst then reset = base + floor(((burst - tokens) * 1000 - credit + rate - 1) / rate) end
if cost == 0 or (cost <= burst and tokens >= cost) then
  if cost > 0 then
    tokens = tokens - cost
    write('SET', key, fmt('%d %d %d', tokens, credit, last), 'PX', A[5])
    reset = base + floor(((burst - tokens) * 1000 - credit + rate - 1) / rate)
  end
  return {1, tokens, 0, reset, now}
end
local retry = 0
if cost <= burst then retry = base - now + floor(((cost - tokens) * 1000 - credit + rate - 1) / rate) end
if v then return {0, tokens, retry, reset, now, s1, s2, s3, call('PTTL', key)} end
return {0, tokens, retry, reset, now, burst, 0, now, -2}
`

const tokenBucketLua = luaPrelude + tokenBucketBody

// gcraLua mirrors rules.GCRA.Take, with the arrival time kept as (ms, remainder) since TAT =
// now*rate would not be exact in a double. ARGV: now, ratePerSec, burst, cost (at most burst: a
// larger one is refused in Go before any lookup), ttlMs.
const gcraBody = `
local rate, burst = tonumber(A[2]), tonumber(A[3])
local tm, tr = now, 0
if v then tm, tr = s1, s2 end
local dm = tm - now
-- lag = tat - now*rate, formed only when dm*rate is small; otherwise only its sign and size
-- against burst*1000 matter: dm < 0 means a full bucket (lag < 0), and dm > burst*1000/rate
-- means lag > burst*1000 >= every room below.
local B = burst * 1000
local lag
if dm < 0 then lag = -1 elseif dm <= floor(B / rate) then lag = dm * rate + tr else lag = B + 1 end
local room = (burst - cost) * 1000
if lag <= room then
  if cost > 0 then
    if lag <= 0 then tm, tr = now, 0 end
    local x = tr + cost * 1000
    local r = x % rate
    tm, tr = tm + (x - r) / rate, r
    write('SET', key, fmt('%d %d', tm, tr), 'PX', A[5])
    if lag < 0 then lag = 0 end
    lag = lag + cost * 1000
  end
  local remaining, reset = burst, now
  if lag > 0 then
    reset = tm
    if tr > 0 then reset = tm + 1 end
    remaining = floor((B - lag) / 1000)
  end
  return {1, remaining, 0, reset, now}
end
-- Refused: ceil((lag - room) / rate) = dm - floor((room - tr) / rate), with room - tr > -rate,
-- exact even where lag itself was not formed.
local retry = dm - floor((room - tr) / rate)
local remaining, reset = 0, tm
if tr > 0 then reset = tm + 1 end
if lag < B then remaining = floor((B - lag) / 1000) end
return {0, remaining, retry, reset, now, tm, tr, 0, call('PTTL', key)}
`

const gcraLua = luaPrelude + gcraBody

// slidingLogLua mirrors rules.SlidingLog.Take on a sorted set (see MaxCachedLogLimit for what
// a refusal returns): one member per admitted unit,
// scored by its time, named "<time>:<i>" with i counting the units at that time (they all leave
// the window together, so the names never repeat while live). Live entries are those after
// now - window, as in the engine; a refusal and cost 0 write nothing, and an admission first drops
// the expired entries. Units are recorded at the newest entry's time if that is later than now,
// which keeps the log sorted, as the engine does. Times are below 2^50, exact as scores.
// ARGV: now, limit, windowMs, cost, ttlMs.
const slidingLogBody = `
local limit, w = tonumber(A[2]), tonumber(A[3])
local cut = now - w
local n = call('ZCOUNT', key, '(' .. fmt('%d', cut), '+inf')
local function newest()
  local e = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  return tonumber(e[2])
end
if cost <= limit - n then
  if cost > 0 then
    write('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', cut))
    local t = now
    if n > 0 then
      local nt = newest()
      if nt > t then t = nt end
    end
    local ts = fmt('%d', t)
    local c = call('ZCOUNT', key, ts, ts)
    local i = 0
    while i < cost do
      -- ZADD in chunks: Lua's unpack is bounded by the C stack.
      local args, m = {}, 0
      while i < cost and m < 1000 do
        args[2 * m + 1] = ts
        args[2 * m + 2] = ts .. ':' .. fmt('%d', c + i)
        i, m = i + 1, m + 1
      end
      write('ZADD', key, unpack(args))
    end
    write('PEXPIRE', key, A[5])
    -- t is now the newest entry; read as such, since a deciding pass of the several-limits
    -- script (multiLua) has not written it.
    return {1, limit - n - cost, 0, t + w, now}
  end
  local reset = now
  if n > 0 then reset = newest() + w end
  return {1, limit - n, 0, reset, now}
end
local retry = 0
if cost <= limit then
  -- The (cost - free)-th oldest live entry must leave the window first.
  local e = call('ZRANGEBYSCORE', key, '(' .. fmt('%d', cut), '+inf', 'WITHSCORES', 'LIMIT', cost - (limit - n) - 1, 1)
  retry = tonumber(e[2]) + w - now
end
local reset = now
if n > 0 then reset = newest() + w end
-- n exceeds a lowered per-call limit: nothing is left, never less.
local remaining = limit - n
if remaining < 0 then remaining = 0 end
-- A log longer than the limit (one a larger per-call limit filled) is not sent: it may hold more
-- than 32 times, and the cache, which rebuilds the log at the policy's limit, would drop its newest.
if n == 0 or n > limit or limit > 32 then return {0, remaining, retry, reset, now, -2} end
-- A small log goes back whole, as (time, count) pairs oldest first, for the deny cache.
local out = {0, remaining, retry, reset, now}
local e = call('ZRANGEBYSCORE', key, '(' .. fmt('%d', cut), '+inf', 'WITHSCORES')
local at, cnt = nil, 0
for j = 2, #e, 2 do
  local sc = tonumber(e[j])
  if sc == at then
    cnt = cnt + 1
  else
    if at then out[#out + 1], out[#out + 2] = at, cnt end
    at, cnt = sc, 1
  end
end
out[#out + 1], out[#out + 2] = at, cnt
out[#out + 1] = call('PTTL', key)
return out
`

const slidingLogLua = luaHeader + slidingLogBody

// leakyBucketLua mirrors rules.LeakyBucket.Take; waits count from the later of now and the
// state's last drain. A gap longer than drainMs is clamped to it, which empties any bucket just
// as the full gap would, and keeps rate*dt <= capacity*1000 + rate < 2^43.
// ARGV: now, ratePerSec, capacity, cost, ttlMs, drainMs.
const leakyBucketBody = `
local rate, cap = tonumber(A[2]), tonumber(A[3])
local level, credit, last = 0, 0, now
if v then level, credit, last = s1, s2, s3 end
local dt = now - last
if dt > 0 then
  local drain = tonumber(A[6])
  if dt > drain then dt = drain end
  local c = credit + rate * dt
  local r = c % 1000
  local drained = (c - r) / 1000
  if drained >= level then level, credit = 0, 0 else level, credit = level - drained, r end
  last = now
end
local base = now
if last > now then base = last end
if cost <= cap - level then
  if cost > 0 then
    level = level + cost
    write('SET', key, fmt('%d %d %d', level, credit, last), 'PX', A[5])
  end
  local reset = base
  if level > 0 then reset = base + floor((level * 1000 - credit + rate - 1) / rate) end
  return {1, cap - level, 0, reset, now}
end
local retry = 0
if cost <= cap then retry = base - now + floor(((level + cost - cap) * 1000 - credit + rate - 1) / rate) end
local reset = base
if level > 0 then reset = base + floor((level * 1000 - credit + rate - 1) / rate) end
if v then return {0, cap - level, retry, reset, now, s1, s2, s3, call('PTTL', key)} end
return {0, cap - level, retry, reset, now, 0, 0, now, -2}
`

const leakyBucketLua = luaPrelude + leakyBucketBody

// dualBucketLua mirrors rules.DualBucket.Take: two buckets per minute sharing one clock, in
// sixty-thousandths; a gap is clamped to the period, which fills both, and keeps perMin*dt below
// 2^48. An admitted call spends a request even at cost 0, so it is always stored.
// ARGV: now, requestsPerMin, tokensPerMin, cost, ttlMs.
const dualBucketBody = `
local rpm, tpm = tonumber(A[2]), tonumber(A[3])
local req, tok, rc, tc, last = rpm, tpm, 0, 0, now
if v then req, tok, rc, tc, last = s1, s2, s3, s4, s5 end
local dt = now - last
if dt > 0 then
  if dt > 60000 then dt = 60000 end
  local c = rc + rpm * dt
  local r = c % 60000
  req, rc = req + (c - r) / 60000, r
  if req >= rpm then req, rc = rpm, 0 end
  c = tc + tpm * dt
  r = c % 60000
  tok, tc = tok + (c - r) / 60000, r
  if tok >= tpm then tok, tc = tpm, 0 end
  last = now
end
local base = now
if last > now then base = last end
local function wait(have, credit, per, need)
  if have >= need then return 0 end
  return floor(((need - have) * 60000 - credit + per - 1) / per)
end
local allowed = 0
if req >= 1 and tok >= cost then
  req, tok, allowed = req - 1, tok - cost, 1
  write('SET', key, fmt('%d %d %d %d %d', req, tok, rc, tc, last), 'PX', A[5])
end
local remaining = tok
if req < 1 then remaining = 0 end
local reset = base + math.max(wait(req, rc, rpm, rpm), wait(tok, tc, tpm, tpm))
if allowed == 1 then return {1, remaining, 0, reset, now} end
local retry = 0
if cost <= tpm then retry = base - now + math.max(wait(req, rc, rpm, 1), wait(tok, tc, tpm, cost)) end
if v then return {0, remaining, retry, reset, now, s1, s2, s3, s4, s5, call('PTTL', key)} end
return {0, remaining, retry, reset, now, rpm, tpm, 0, 0, now, -2}
`

const dualBucketLua = luaPrelude + dualBucketBody

// script is one Lua source and its SHA-1, run with EVALSHA and, only on NOSCRIPT (the server
// never ran it), once more with EVAL.
type script struct {
	src string
	sha string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// noRetryCmd marks the script call as not retryable by go-redis: once a request may have reached
// the server, running it again could count the same request twice. go-redis otherwise replays a
// command on EOF or a reset connection, which is exactly when a script may already have run.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry tells go-redis never to replay this command.
func (noRetryCmd) NoRetry() bool { return true }

func (s *script) run(ctx context.Context, c redis.UniversalClient, keys []string, args []any) ([]int64, error) {
	cmd := redis.NewCmd(ctx, s.argv("evalsha", s.sha, keys, args)...)
	err := c.Process(ctx, noRetryCmd{cmd})
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = redis.NewCmd(ctx, s.argv("eval", s.src, keys, args)...)
		err = c.Process(ctx, noRetryCmd{cmd})
	}
	if err != nil {
		return nil, err
	}
	return cmd.Int64Slice()
}

func (s *script) argv(verb, body string, keys []string, args []any) []any {
	v := make([]any, 0, 3+len(keys)+len(args))
	v = append(v, verb, body, len(keys))
	for _, k := range keys {
		v = append(v, k)
	}
	return append(v, args...)
}
