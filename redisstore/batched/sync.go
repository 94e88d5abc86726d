package batched

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/internal/bound"
	"github.com/slidelimit/slidelimit/redisstore/internal/check"
)

// maxBatch bounds the script calls of one pipeline, so that one exchange cannot hold the server
// (or the connection) for long.
const maxBatch = 1024

func (l *Limiter) run() {
	defer close(l.done)
	t := time.NewTicker(l.cfg.sync)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.syncMu.Lock()
			l.exchange(l.clk.Now())
			l.syncMu.Unlock()
		}
	}
}

// liveness is how long a process stays in the fleet's membership after its last heartbeat.
// A process whose exchange stalls (a loaded host, a long pause of the garbage collector) must
// not drop out and make the others' shares jump: at least a second.
func (l *Limiter) liveness() time.Duration { return max(5*l.cfg.sync, time.Second) + 2*l.cfg.timeout }

// exchange is one sync interval's work: a heartbeat (which also probes an unreachable Redis and
// detects a server that lost its data), reconciliation when Redis is back, then one pipeline of
// renewals and returns, and from time to time forgetting idle keys. Called with syncMu held.
func (l *Limiter) exchange(now int64) {
	wasOffline := l.offline.Load()
	lost, ok := l.heartbeat(now)
	if !ok {
		return
	}
	if lost {
		l.lossGen++
		l.redeclare = true
	}
	if wasOffline || l.redeclare {
		// A re-declaration that failed is sent again at the next exchange, however long Redis
		// then stays up: the heartbeat saw the new epoch once, and will not report the loss again.
		if !l.reconcile(l.redeclare) {
			return
		}
		l.redeclare = false
		l.offline.Store(false)
	}
	l.flush(now, false)
	if every := max(l.w, 1000); now-l.lastForget >= every {
		l.lastForget = now
		l.forget()
	}
}

// probe dials the server of a *redis.Client (a single node, or a sentinel's master) outside its
// pool, while the limiter is offline; any other client, or an online limiter, passes. go-redis's
// pool stops dialing once PoolSize dials have failed, counted over the client's life, and then
// tries once a second: a heartbeat that dialed through the pool every sync interval of an outage
// got it there after PoolSize intervals, and the process then stayed offline up to a second
// after Redis was back. The probe is the client's own dialer (TLS, a sentinel's lookup), so the
// pool dials only once the server takes connections again.
func (l *Limiter) probe(ctx context.Context) error {
	c, ok := l.client.(*redis.Client)
	if !ok || !l.offline.Load() {
		return nil
	}
	o := c.Options()
	if o.Dialer == nil { // set by redis.NewClient; a client built otherwise is not probed
		return nil
	}
	conn, err := o.Dialer(ctx, o.Network, o.Addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// heartbeat records the process as live and learns the fleet's size and epoch. It reports whether
// Redis lost its data since the last heartbeat, and whether Redis answered.
func (l *Limiter) heartbeat(now int64) (lost, ok bool) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
	defer cancel()
	keys, args := []string{l.members, l.epochK, l.quietK}, []any{l.id, now, l.liveness().Milliseconds(), hex.EncodeToString(b[:]), l.epoch, l.liveEnd}
	var cmd *redis.Cmd
	err := l.probe(ctx)
	if err == nil {
		cmd, err = bound.Call(ctx, l.bounded, func(ctx context.Context) (*redis.Cmd, error) {
			return heartbeatScript.run(ctx, l.client, keys, args...)
		})
		err = check.OwnTimeout(err, ctx, l.cfg.timeout)
	}
	l.exchanges.Inc()
	var v []any
	if err == nil {
		v, err = cmd.Slice()
		if err == nil && len(v) != 4 {
			err = fmt.Errorf("batched: heartbeat returned %v", v)
		}
	}
	var n, quiet, liveEnd int64
	var epoch string
	if err == nil {
		var okN, okE, okQ, okL bool
		n, okN = v[0].(int64)
		epoch, okE = v[1].(string)
		quiet, okQ = v[2].(int64)
		liveEnd, okL = v[3].(int64)
		if !okN || !okE || !okQ || !okL {
			err = fmt.Errorf("batched: heartbeat returned %v", v)
		}
	}
	if err != nil {
		l.failures.Inc()
		l.goOffline(fmt.Errorf("heartbeat: %w", err))
		l.reportErr(l.unavailable("heartbeat", err))
		return false, false
	}
	lost = l.epoch != "" && epoch != l.epoch
	l.epoch = epoch
	if lost {
		// Redis came back empty: every process re-declares what it has counted, and none leases
		// until all live ones have had a heartbeat to do so. The quiet starts before the new
		// epoch is published, so that no lease carries the new epoch without seeing the quiet.
		// Until every member that was live has had a heartbeat: its own liveness, or the
		// longest it saw before the loss emptied the membership, whichever ends later.
		until := max(now+l.liveness().Milliseconds(), l.liveEnd)
		l.quietUntil.Store(until)
		// Said once, as going offline is: requests get ErrOffline for the quiet, which says that
		// the limiter decides alone but not why. A lease that met the loss first said it already.
		quietFor := time.Duration(until-now) * time.Millisecond
		err := fmt.Errorf("%w: batched: Redis lost the fleet's counts (a new epoch); deciding alone for %v while the fleet re-declares them", redisstore.ErrUnavailable, quietFor)
		if !l.lossSaid.Swap(false) && l.cfg.onError == nil {
			slog.Warn("batched: Redis lost its data; deciding alone, Take returns ErrOffline, for the quiet while the fleet re-declares its counts",
				"limiter", l.name, "quiet", quietFor)
		}
		l.reportErr(err)
	}
	l.liveEnd = liveEnd
	if quiet > l.quietUntil.Load() {
		// A quiet another process started (this one knew no older epoch to miss): held to as
		// its own, on this process's clock, which reads close to the starter's.
		l.quietUntil.Store(quiet)
	}
	l.leaseEpoch.Store(&epoch)
	if lost || l.offline.Load() || now < l.quietUntil.Load() {
		// After an outage the set has lost (a server restarted empty) or is about to drop (every
		// member whose liveness ended) the processes that have not had a heartbeat since: the
		// fleet is the larger count until every live one has.
		n = max(n, l.fleet.Load())
	}
	l.fleet.Store(max(n, 1))
	return lost, true
}

// pending is one queued exchange for an entry, whose mutex is held until its reply is applied.
type pending struct {
	e          *entry
	a          adj
	idx, now   int64 // the entry's window and the time, read with its mutex held
	want, need int64
}

// send runs the pending calls in one pipeline and applies each reply, releasing every entry. It
// reports whether Redis answered.
func (l *Limiter) send(ps []pending) bool {
	if len(ps) == 0 {
		return true
	}
	epoch := l.checkedEpoch()
	calls := make([]call, len(ps))
	for i, p := range ps {
		calls[i] = call{s: leaseScript, keys: l.leaseKeys(p.e, epoch), args: l.leaseArgs(p.now, p.want, p.need, p.a, epoch)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
	// Past the deadline, bound.Call returns while the pipeline may still fill in calls' replies:
	// they are read below only when err is nil.
	_, err := bound.Call(ctx, l.bounded, func(ctx context.Context) (struct{}, error) {
		err := runAll(ctx, l.client, calls)
		if err == nil && epoch != "" {
			err = l.againWithoutEpoch(ctx, ps, calls)
		}
		return struct{}{}, err
	})
	err = check.OwnTimeout(err, ctx, l.cfg.timeout)
	cancel()
	l.exchanges.Add(int64(len(calls)))
	ok := true
	cause := err
	for i, p := range ps {
		var r reply
		e := err
		if e == nil {
			r, e = parseReply(calls[i].cmd)
		}
		if e != nil {
			l.failed(p.e, p.a)
			if l.transportFailure(e) {
				ok = false
				if cause == nil {
					cause = e // an error reply of one call: the pipeline itself went through
				}
			} else {
				// An error reply about this key alone: the limiter stays online, but the
				// exchange failed, and WithOnError hears of every failed exchange.
				l.reportErr(l.hideSubject(p.e, fmt.Errorf("exchange: %w", e)))
			}
		} else {
			l.acked(p.e, p.a)
			if p.need > 0 || r.grant > 0 {
				p.e.seq.Add(1) // the cell and the refusal change together (see entry.seq)
				_, _ = l.applyGrant(p.e, p.idx, p.now, r, 0, 0)
				p.e.seq.Add(1)
			}
		}
		p.e.mu.Unlock()
	}
	if !ok {
		l.goOffline(fmt.Errorf("exchange: %w", cause))
		l.reportErr(l.unavailable("exchange", cause))
	}
	return ok
}

// againWithoutEpoch sends once more, without the epoch, the calls of a pipeline that a cluster
// node refused with CROSSSLOT (which it does before running anything), and stops checking the
// epoch for good (see checkedEpoch). It returns the transport error of that second send.
func (l *Limiter) againWithoutEpoch(ctx context.Context, ps []pending, calls []call) error {
	var again []int
	for i := range calls {
		if crossSlot(calls[i].cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return nil
	}
	l.epochCheck.Store(false)
	sub := make([]call, len(again))
	for j, i := range again {
		p := ps[i]
		sub[j] = call{s: leaseScript, keys: l.leaseKeys(p.e, ""), args: l.leaseArgs(p.now, p.want, p.need, p.a, "")}
	}
	err := runAll(ctx, l.client, sub)
	for j, i := range again {
		calls[i].cmd = sub[j].cmd
	}
	return err
}

// flush renews the leases running low and gives back unused leases of ended windows (and, with
// all, every lease held, as Close does). Called with syncMu held.
func (l *Limiter) flush(now int64, all bool) {
	var ps []pending
	// Entries whose mutex this flush holds (queued in ps), or has already exchanged.
	seen := make(map[*entry]bool)
	ok := true
	push := func(p pending) {
		seen[p.e] = true
		ps = append(ps, p)
		if len(ps) >= maxBatch {
			ok = l.send(ps) && ok
			ps = ps[:0]
		}
	}
	quiet := now < l.quietUntil.Load() || l.offline.Load()
	// Renewals first: they are what keeps hot keys deciding in process.
	for drained := false; !drained && !all; {
		select {
		case e := <-l.renew:
			if seen[e] {
				// Queued again while this flush renews it. Left set, the flag would keep the key
				// from ever being queued again, and from being forgotten.
				e.queued.Store(false)
				continue
			}
			e.mu.Lock()
			e.queued.Store(false)
			if e.dead || quiet || !ok {
				e.mu.Unlock()
				continue
			}
			now, idx := l.lockedNow(e)
			rem := int64(uint32(e.cell.Load()))
			if rem >= int64(e.low.Load()) {
				e.mu.Unlock()
				continue
			}
			want := max(l.wantFor(e, now, 1)-rem, 1)
			push(pending{e: e, a: l.adjustments(e, false), idx: idx, now: now, want: want, need: 1})
		default:
			drained = true
		}
	}
	// Then every entry holding units: ended windows give back what is left.
	visit := func(e *entry) bool {
		if !ok {
			return false
		}
		if seen[e] {
			return true
		}
		e.mu.Lock()
		if e.dead {
			l.holding.Delete(e)
			e.mu.Unlock()
			return true
		}
		now, idx := l.lockedNow(e)
		a := l.adjustments(e, false)
		if all {
			// The process is leaving: give back the current window's lease too.
			for {
				c := e.cell.Load()
				if e.cell.CompareAndSwap(c, cellOf(idx, 0)) {
					if u := int64(uint32(c)); u > 0 && e.rec[0].win == idx*l.w {
						e.rec[0].granted -= u
						a.delta[0] -= u
						a.ret[0] += u
					}
					break
				}
			}
		}
		if int64(uint32(e.cell.Load())) == 0 {
			l.holding.Delete(e)
		}
		if a.none() {
			e.mu.Unlock()
			return true
		}
		push(pending{e: e, a: a, idx: idx, now: now})
		return true
	}
	if all {
		// Close's give-back visits every entry, not only those holding units: a Take leasing
		// under e.mu for a key whose lease had run dry (so not in holding) puts its grant there
		// only once it returns. Locking each entry waits for such a lease; a Take that locks it
		// after the visit finds the limiter closed and leases nothing (see decideLocked).
		l.entries.Range(func(_ string, e *entry) bool { return visit(e) })
	} else {
		l.holding.Range(func(e *entry, _ struct{}) bool { return visit(e) })
	}
	if ok {
		l.send(ps)
	} else {
		for _, p := range ps {
			p.e.mu.Unlock()
		}
	}
}

// reconcile brings Redis up to date after an outage: it charges the units admitted offline and,
// after a data loss, re-declares every unit this process has counted. It reports success.
func (l *Limiter) reconcile(lost bool) bool {
	var ps []pending
	ok := true
	l.entries.Range(func(_ string, e *entry) bool {
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			return true
		}
		now, idx := l.lockedNow(e)
		a := l.adjustments(e, lost)
		if a.none() {
			if a.lost {
				// Nothing used to re-declare, but the lease was counted only on the server that
				// lost it: recorded as declared and returned, or the next flush would give its
				// unused units back to a server that never counted them, uncounting the units
				// the rest of the fleet has just re-declared.
				l.acked(e, a)
			}
			e.mu.Unlock()
			return true
		}
		// A lease Redis granted in a later window than this clock's (see applyGrant) is declared
		// in that window: a script that finds no state starts its window at now, and would drop
		// the adjustment of a window past it.
		now = max(now, e.rec[0].win)
		ps = append(ps, pending{e: e, a: a, idx: idx, now: now})
		if len(ps) >= maxBatch {
			ok = l.send(ps)
			ps = ps[:0]
		}
		return ok
	})
	if !ok {
		for _, p := range ps {
			p.e.mu.Unlock()
		}
		return false
	}
	return l.send(ps)
}

// forget drops the entries whose lease is two windows old or more: their counts no longer weigh
// on any estimate, so a new entry would decide the same. The time is read afresh for each entry,
// with its mutex held, so that an entry a decision has just rolled is never taken for an old one.
func (l *Limiter) forget() {
	old := func(e *entry) bool {
		return int32(uint32(l.rule.Index(l.clk.Now()))-uint32(e.cell.Load()>>32)) >= 2
	}
	l.entries.Range(func(k string, e *entry) bool {
		if !old(e) {
			return true
		}
		e.mu.Lock()
		if old(e) && !e.queued.Load() {
			e.dead = true
			l.entries.Delete(k)
			l.holding.Delete(e)
		}
		e.mu.Unlock()
		return true
	})
}

// lockedNow reads the time with e.mu held and rolls e to it. Read any earlier, the time could be
// older than a decision that rolled e meanwhile, and rolling e back would lose its counts.
func (l *Limiter) lockedNow(e *entry) (now, idx int64) {
	now = l.clk.Now()
	idx = l.rule.Index(now)
	l.roll(e, idx)
	return now, idx
}
