package batched

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/internal/check"
)

// leaseLua is the one script that touches a key's fleet counts. The key holds "win cur prev": the
// aligned start (ms) of the current window and the units the fleet has counted in it and in the
// window before. Counted means leased: a unit is added to cur when a process is granted it, before
// that process admits anything with it, which is why the fleet can never admit more than the
// limit allows.
//
// ARGV: now, limit, window ms, want, need, adjWin1, adj1, adjWin2, adj2, ttl ms, epoch.
//
// When epoch is not empty, KEYS[2] is the fleet's epoch key, and a server that no longer holds that
// token (it restarted empty, or failed over without the data) is answered with an EPOCHLOST error
// and nothing else is done: a lease granted against the emptied counts could over-admit until the
// next heartbeat noticed. On a cluster (or a Ring) the epoch key lies in another slot (or shard)
// than the key's, so the epoch is sent only through a client of one server (see checkedEpoch),
// and elsewhere only the heartbeat notices.
//
// The script rolls the state to now's window (a state from a later window is kept, now read as
// its first millisecond), applies up to two signed adjustments to the window starting at adjWin
// (a negative one returns a lease's unused part, a positive one charges units admitted while
// Redis was away or re-declares counts Redis lost; an adjustment for a window older than the
// previous one is dropped, since it no longer weighs on any estimate), forms the estimate
//
//	est = floor(prev * (w - elapsed) / w) + cur
//
// and, when need > 0 and limit - est >= need, grants min(want, limit - est) units by adding them to
// cur. It returns {grant, win, cur, prev, now}: the state after the call, from which the caller
// replays the policy's own refusal (RetryAfter) when nothing was granted.
//
// Exactness: counts stay below 2^34 (cur and prev hold at most a limit < 2^32 of grants plus as
// many charged units per process), windows are at most 2^32 ms, and now at most 2^50. The product
// prev*(w - elapsed) could reach 2^66, so it is split: with b = bh*2^16 + bl, x = prev*bh < 2^50
// and floor(x/w) and x mod w are exact on doubles (for integers a >= 0, c >= 1 with a + c < 2^53
// the rounded quotient cannot reach the next integer), and then r*2^16 + prev*bl < 2^51 gives the
// low part exactly.
const leaseLua = `
local call, tonumber, floor, fmt, match = redis.call, tonumber, math.floor, string.format, string.match
local A, key = ARGV, KEYS[1]
if #KEYS > 1 and A[11] ~= '' and call('GET', KEYS[2]) ~= A[11] then
  return redis.error_reply('EPOCHLOST batched: the fleet epoch is gone: Redis lost its data')
end
local now, limit, w = tonumber(A[1]), tonumber(A[2]), tonumber(A[3])
local want, need = tonumber(A[4]), tonumber(A[5])
local start = now - now % w
local win, cur, prev = start, 0, 0
local v = call('GET', key)
if v then
  local s1, s2, s3 = match(v, '^(%d+) (%d+) (%d+)$')
  if not s1 then return redis.error_reply('batched: malformed state at ' .. key) end
  win, cur, prev = tonumber(s1), tonumber(s2), tonumber(s3)
end
if start > win then
  if start == win + w then prev = cur else prev = 0 end
  cur = 0
  win = start
end
local changed = false
for i = 6, 8, 2 do
  local aw, d = tonumber(A[i]), tonumber(A[i + 1])
  if d ~= 0 then
    if aw == win then
      cur = cur + d
      if cur < 0 then cur = 0 end
      changed = true
    elseif aw == win - w then
      prev = prev + d
      if prev < 0 then prev = 0 end
      changed = true
    end
  end
end
local elapsed = now - win
if elapsed < 0 then elapsed = 0 end
local est = cur
if prev > 0 then
  local b = w - elapsed
  local bl = b % 65536
  local x = prev * ((b - bl) / 65536)
  local r = x % w
  est = (x - r) / w * 65536 + floor((r * 65536 + prev * bl) / w) + cur
end
local grant = 0
if need > 0 and limit - est >= need then
  grant = limit - est
  if grant > want then grant = want end
  cur = cur + grant
  changed = true
end
if changed then
  call('SET', key, fmt('%d %d %d', win, cur, prev), 'PX', A[10])
end
return {grant, win, cur, prev, now}
`

// heartbeatLua records this process as live and reports the fleet. KEYS: members, epoch, quiet.
// ARGV: id, now, liveness ms, a fresh epoch token, the epoch this process knew ("" for none), when
// the longest liveness among the members it last saw ends (0 for none). It scores id with the
// time its liveness ends, now + its own liveness, so that a member with a longer sync interval
// than the caller's is not dropped by the caller's shorter liveness (the two would then count
// different fleets, and their shares while Redis is away add up to more than the limit); drops
// the members whose liveness has ended, keeps the set at least as long as the longest liveness in
// it, and returns {live members, epoch, end of the quiet (0 for none), end of the longest
// liveness}: the epoch is created when missing, so a server restarted empty hands out a new one and every process that
// knew the old one learns that its counts are gone. Such a process starts a quiet in Redis too,
// until its own liveness or the longest it last saw ends, whichever is later (the loss emptied the
// membership, and a member with a longer sync interval re-declares only at its next heartbeat),
// so that a process that knew no epoch (one that joined after the loss, or started during the
// outage) holds off leasing with the others while they re-declare their counts.
//
// The quiet key holds when the last quiet ends ("0" before any), with no TTL, and is created by
// the first heartbeat: an ended quiet reads as none, since a process keeps to one only while its
// clock is before that end. Kept present like the epoch (and the members, which this very call
// fills), it lets the script run while the three keys' slot is migrating: a cluster node answers
// TRYAGAIN to a multi-key call that finds some of its keys missing there, even before any has
// moved, and every process would go offline for all its keys for as long as the slot stays open.
// A quiet key that an earlier version wrote with a TTL loses it at the next heartbeat (PERSIST).
const heartbeatLua = `
local call, tonumber = redis.call, tonumber
local now, live = tonumber(ARGV[2]), tonumber(ARGV[3])
call('ZADD', KEYS[1], now + live, ARGV[1])
call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
local last = call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local keep = tonumber(last[2]) - now + live
if call('PTTL', KEYS[1]) < keep then call('PEXPIRE', KEYS[1], keep) end
local e = call('GET', KEYS[2])
if not e then
  e = ARGV[4]
  call('SET', KEYS[2], e)
end
local q = call('GET', KEYS[3])
if ARGV[5] ~= '' and ARGV[5] ~= e then
  q = math.max(now + live, tonumber(ARGV[6]) or 0)
  call('SET', KEYS[3], q)
elseif not q then
  q = 0
  call('SET', KEYS[3], q)
else
  call('PERSIST', KEYS[3])
end
return {call('ZCARD', KEYS[1]), e, tonumber(q) or 0, tonumber(last[2])}
`

// leaveLua removes a process from the members set on Close. KEYS: members. ARGV: id.
const leaveLua = `return redis.call('ZREM', KEYS[1], ARGV[1])`

type script struct{ src, sha string }

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	leaseScript     = newScript(leaseLua)
	heartbeatScript = newScript(heartbeatLua)
	leaveScript     = newScript(leaveLua)
)

// noRetryCmd keeps go-redis from replaying a script whose request may have reached the server: a
// replayed lease would be counted twice (under-admission), a replayed charge would count units
// twice. go-redis also refuses to retry a whole pipeline that holds one.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry tells go-redis never to replay this command.
func (noRetryCmd) NoRetry() bool { return true }

func evalArgs(s *script, sha bool, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	if sha {
		a = append(a, "evalsha", s.sha, len(keys))
	} else {
		a = append(a, "eval", s.src, len(keys))
	}
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

// run runs s once with EVALSHA, and again with EVAL only on NOSCRIPT (the server never ran it).
func (s *script) run(ctx context.Context, c redis.UniversalClient, keys []string, args ...any) (*redis.Cmd, error) {
	cmd := redis.NewCmd(ctx, evalArgs(s, true, keys, args)...)
	err := c.Process(ctx, noRetryCmd{cmd})
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = redis.NewCmd(ctx, evalArgs(s, false, keys, args)...)
		err = c.Process(ctx, noRetryCmd{cmd})
	}
	return cmd, err
}

// call is one queued script run of a pipeline.
type call struct {
	s    *script
	keys []string
	args []any
	cmd  *redis.Cmd
}

// runAll sends calls in one pipeline (one round trip on a single node; one per node on a
// cluster), then once more with EVAL for those the server answered NOSCRIPT. It returns the
// transport error, if any; each call's own reply or error reply is in its cmd.
func runAll(ctx context.Context, c redis.UniversalClient, calls []call) error {
	if len(calls) == 0 {
		return nil
	}
	send := func(idx []int, sha bool) error {
		p := c.Pipeline()
		for _, i := range idx {
			cl := &calls[i]
			cl.cmd = redis.NewCmd(ctx, evalArgs(cl.s, sha, cl.keys, cl.args)...)
			_ = p.Process(ctx, noRetryCmd{cl.cmd})
		}
		_, err := p.Exec(ctx)
		var rerr redis.Error
		if err != nil && errors.As(err, &rerr) {
			// An error reply of one command: the others were answered, each cmd has its own.
			return nil
		}
		return err
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if err := send(all, true); err != nil {
		return err
	}
	var again []int
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		return send(again, false)
	}
	return nil
}

// transportFailure reports whether err says the server could not be reached or cannot serve now,
// as opposed to an error reply about one call.
func (l *Limiter) transportFailure(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	// EPOCHLOST: the server lost the fleet's counts (see leaseLua); deciding alone until the next
	// heartbeat re-declares them is the outage's rule.
	for _, p := range []string{"BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "OOM", "NOREPLICAS", "MISCONF", "EPOCHLOST"} {
		if check.HasPrefix(err, p) {
			return true
		}
	}
	// An error every key gets (a password, a permission, no scripting, a missing database, a
	// cluster node's MOVED to a client that cannot follow it) would cost every request a round
	// trip that never succeeds: offline, only the heartbeat asks again. A cluster client follows
	// MOVED and ASK itself, and passes one on only past its redirect limit, for one slot in
	// migration: that one is about the call.
	return check.EveryKey(err, l.cluster) != ""
}

// unavailable returns err, the failure of what (a heartbeat, an exchange), as the error reported
// for it: redisstore.ErrMisconfigured with what is wrong in words where every key would get it,
// as redisstore's Limiter reports it, and redisstore.ErrUnavailable otherwise. Without the words,
// a plain client on a cluster node read as Redis not answering, and its fleet stayed offline
// with nothing in the log naming the cluster.
func (l *Limiter) unavailable(what string, err error) error {
	if hint := check.EveryKey(err, l.cluster); hint != "" {
		return misconfigured(hint, fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%w: %s: %w", redisstore.ErrUnavailable, what, err)
}

// misconfigured is err, which every key would get, reported as redisstore's Limiter reports it:
// redisstore.ErrMisconfigured, then hint, what is wrong in words (see check.EveryKey).
func misconfigured(hint string, err error) error {
	return fmt.Errorf("%w: %s: %w", redisstore.ErrMisconfigured, hint, err)
}
