package reference

import "math/big"

// This file holds the bucket policies of docs/policies.md: token bucket, GCRA, leaky bucket and dual
// bucket. Each follows its text line by line.

// bucket is one refilling (or draining) dimension: whole units and a credit in fractions of a
// unit (thousandths, or 1/60000 for the dual bucket). For the leaky bucket, have is the level.
type bucket struct {
	have, credit int64
}

// tokenBucket is docs/policies.md "token bucket".
type tokenBucket struct {
	rate, burst, fillMs int64
	keys                map[int64]*tbState
}

type tbState struct {
	bucket
	last int64
}

func newTokenBucket(rate, burst int64) *tokenBucket {
	return &tokenBucket{rate: rate, burst: burst, fillMs: ceilDiv(burst*1000, rate), keys: map[int64]*tbState{}}
}

// refill: rate*dt <= rate*fillMs < burst*1000 + rate < 2^43, far inside int64.
func (p *tokenBucket) refill(s *tbState, now int64) {
	dt := now - s.last
	if dt <= 0 {
		return
	}
	dt = min(dt, p.fillMs)
	s.credit += p.rate * dt
	s.have += s.credit / 1000
	s.credit %= 1000
	if s.have >= p.burst {
		s.have, s.credit = p.burst, 0
	}
	s.last = now
}

func (p *tokenBucket) allow(key, cost, now int64) bool {
	s, ok := p.keys[key]
	if !ok {
		s = &tbState{bucket: bucket{have: p.burst}, last: now} // a new key starts full
		p.keys[key] = s
	}
	p.refill(s, now)
	if s.have < cost {
		return false
	}
	s.have -= cost
	return true
}

func (p *tokenBucket) retryAfter(key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok {
		return 0
	}
	p.refill(s, now)
	if s.have >= 1 {
		return 0
	}
	return ceilDiv(1000-s.credit, p.rate)
}

func (p *tokenBucket) probe(_ string, key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok {
		return p.burst
	}
	p.refill(s, now)
	return s.have
}

func (p *tokenBucket) size() int { return len(p.keys) }

// gcra is docs/policies.md "GCRA". Scaled time (1 ms = rate units, one permit = 1000 units) reaches
// now*rate, about 2^94 at the extremes of the documented ranges, so every scaled quantity is a
// big.Int.
type gcra struct {
	rate, burst int64
	keys        map[int64]*big.Int // the theoretical arrival time, in scaled units
}

func newGCRA(rate, burst int64) *gcra {
	return &gcra{rate: rate, burst: burst, keys: map[int64]*big.Int{}}
}

func bigInt(v int64) *big.Int { return big.NewInt(v) }

func (p *gcra) scaled(now int64) *big.Int { return new(big.Int).Mul(bigInt(now), bigInt(p.rate)) }

func (p *gcra) tolerance() *big.Int { return bigInt((p.burst - 1) * 1000) }

func (p *gcra) allow(key, cost, now int64) bool {
	if cost > p.burst {
		return false // before any lookup: no state is created
	}
	s := p.scaled(now)
	tat, ok := p.keys[key]
	if !ok {
		tat = s
	}
	// refuse iff s < tat - tolerance + (cost-1)*1000
	bound := new(big.Int).Sub(tat, p.tolerance())
	bound.Add(bound, bigInt((cost-1)*1000))
	if s.Cmp(bound) < 0 {
		return false
	}
	next := new(big.Int).Set(s)
	if tat.Cmp(s) > 0 {
		next.Set(tat)
	}
	next.Add(next, bigInt(cost*1000))
	p.keys[key] = next
	return true
}

func (p *gcra) retryAfter(key, now int64) int64 {
	tat, ok := p.keys[key]
	if !ok {
		return 0
	}
	s := p.scaled(now)
	target := new(big.Int).Sub(tat, p.tolerance())
	if s.Cmp(target) >= 0 {
		return 0
	}
	// ceilDiv(target, rate) - now; target > s >= 0 here.
	q := new(big.Int).Add(target, bigInt(p.rate-1))
	q.Quo(q, bigInt(p.rate))
	return q.Sub(q, bigInt(now)).Int64()
}

func (p *gcra) probe(_ string, key, now int64) int64 {
	tat, ok := p.keys[key]
	if !ok {
		return p.burst
	}
	// avail = s - (tat - burst*1000)
	avail := p.scaled(now)
	avail.Sub(avail, tat)
	avail.Add(avail, bigInt(p.burst*1000))
	if avail.Sign() <= 0 {
		return 0
	}
	avail.Quo(avail, bigInt(1000))
	if avail.Cmp(bigInt(p.burst)) > 0 {
		return p.burst
	}
	return avail.Int64()
}

func (p *gcra) size() int { return len(p.keys) }

// leakyBucket is docs/policies.md "leaky bucket"; bucket.have is the level.
type leakyBucket struct {
	rate, capacity, drainMs int64
	keys                    map[int64]*tbState
}

func newLeakyBucket(rate, capacity int64) *leakyBucket {
	return &leakyBucket{rate: rate, capacity: capacity, drainMs: ceilDiv(capacity*1000, rate), keys: map[int64]*tbState{}}
}

func (p *leakyBucket) drain(s *tbState, now int64) {
	dt := now - s.last
	if dt <= 0 {
		return
	}
	dt = min(dt, p.drainMs)
	s.credit += p.rate * dt
	drained := s.credit / 1000
	s.credit %= 1000
	if drained >= s.have {
		s.have, s.credit = 0, 0
	} else {
		s.have -= drained
	}
	s.last = now
}

func (p *leakyBucket) allow(key, cost, now int64) bool {
	s, ok := p.keys[key]
	if !ok {
		s = &tbState{last: now} // a new key is empty
		p.keys[key] = s
	}
	p.drain(s, now)
	if cost > p.capacity-s.have {
		return false
	}
	s.have += cost
	return true
}

func (p *leakyBucket) retryAfter(key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok {
		return 0
	}
	p.drain(s, now)
	if s.have < p.capacity {
		return 0
	}
	return ceilDiv(1000-s.credit, p.rate)
}

func (p *leakyBucket) probe(_ string, key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok {
		return 0
	}
	p.drain(s, now)
	return s.have
}

func (p *leakyBucket) size() int { return len(p.keys) }

// dualBucket is docs/policies.md "dual bucket": two token buckets over a 60,000 ms period sharing
// one last, credits in 1/60000 of a unit.
type dualBucket struct {
	reqPerMin, tokPerMin int64
	keys                 map[int64]*dbState
}

type dbState struct {
	requests, tokens bucket
	last             int64
}

const periodMs = 60_000

func newDualBucket(reqPerMin, tokPerMin int64) *dualBucket {
	return &dualBucket{reqPerMin: reqPerMin, tokPerMin: tokPerMin, keys: map[int64]*dbState{}}
}

// refillDim: perMin*dt <= (2^32-1)*60000 < 2^48.
func refillDim(b *bucket, perMin, dt int64) {
	b.credit += perMin * dt
	b.have += b.credit / periodMs
	b.credit %= periodMs
	if b.have >= perMin {
		b.have, b.credit = perMin, 0
	}
}

func (p *dualBucket) refill(s *dbState, now int64) {
	dt := now - s.last
	if dt <= 0 {
		return
	}
	dt = min(dt, periodMs)
	refillDim(&s.requests, p.reqPerMin, dt)
	refillDim(&s.tokens, p.tokPerMin, dt)
	s.last = now
}

func (p *dualBucket) allow(key, cost, now int64) bool {
	s, ok := p.keys[key]
	if !ok {
		s = &dbState{requests: bucket{have: p.reqPerMin}, tokens: bucket{have: p.tokPerMin}, last: now}
		p.keys[key] = s
	}
	p.refill(s, now)
	if s.requests.have < 1 || s.tokens.have < cost {
		return false
	}
	s.requests.have--
	s.tokens.have -= cost // cost 0 still spends one request
	return true
}

func dimWait(b bucket, perMin int64) int64 {
	if b.have >= 1 {
		return 0
	}
	return ceilDiv(periodMs-b.credit, perMin)
}

func (p *dualBucket) retryAfter(key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok {
		return 0
	}
	p.refill(s, now)
	return max(dimWait(s.requests, p.reqPerMin), dimWait(s.tokens, p.tokPerMin))
}

func (p *dualBucket) probe(call string, key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok {
		if call == CallRequestsOf {
			return p.reqPerMin
		}
		return p.tokPerMin
	}
	p.refill(s, now)
	if call == CallRequestsOf {
		return s.requests.have
	}
	return s.tokens.have
}

func (p *dualBucket) size() int { return len(p.keys) }
