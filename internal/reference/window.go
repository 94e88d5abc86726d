package reference

// This file holds the three window policies: sliding counter (docs/policies.md ("Sliding window
// counter")), sliding log and fixed window (docs/policies.md). Each follows its text line by line.

// slidingCounter is docs/policies.md ("Sliding window counter").
type slidingCounter struct {
	limit, w int64
	keys     map[int64]*scState
}

type scState struct {
	window, current, previous int64
}

func newSlidingCounter(limit, w int64) *slidingCounter {
	return &slidingCounter{limit: limit, w: w, keys: map[int64]*scState{}}
}

// roll brings s to the window containing now and returns carried, elapsed.
func (p *slidingCounter) roll(s *scState, now int64) (carried, elapsed int64) {
	window := now - now%p.w
	if window != s.window {
		if window == s.window+p.w {
			s.previous = s.current
		} else {
			s.previous = 0 // a gap of two windows or more clears both counts
		}
		s.current = 0
		s.window = window
	}
	elapsed = now - window
	// previous <= 2^32-1 and W-elapsed <= 2^32: the product needs up to 64 bits; mulDiv is exact.
	carried = mulDiv(s.previous, p.w-elapsed, p.w)
	return carried, elapsed
}

func (p *slidingCounter) allow(key, cost, now int64) bool {
	s, ok := p.keys[key]
	if !ok {
		s = &scState{window: now - now%p.w}
		p.keys[key] = s
	}
	carried, _ := p.roll(s, now)
	// carried + current + cost <= limit, written so that no cost can overflow.
	if cost > p.limit-carried-s.current {
		return false
	}
	s.current += cost
	return true
}

func (p *slidingCounter) retryAfter(key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok {
		return 0
	}
	carried, elapsed := p.roll(s, now)
	if carried+s.current < p.limit {
		return 0
	}
	need := p.limit - s.current - 1
	if need < 0 {
		return s.window + p.w - now + 1 // the window edge plus 1 ms
	}
	if s.previous == 0 {
		return 0
	}
	excess := s.previous - need - 1
	if excess < 0 {
		return 0
	}
	target := mulDiv(p.w, excess, s.previous) + 1
	return max(0, target-elapsed)
}

func (p *slidingCounter) probe(_ string, key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok {
		return 0
	}
	carried, _ := p.roll(s, now)
	return carried + s.current
}

func (p *slidingCounter) size() int { return len(p.keys) }

// slidingLog keeps each key's admitted timestamps, oldest first, as runs of equal timestamps
// (an admission of cost n pushes n copies of now: one run). Expiry drops a whole run at once,
// which is what dropping its copies one by one would do since they share a timestamp.
type slidingLog struct {
	limit, w int64
	keys     map[int64]*[]logRun
}

type logRun struct{ at, n int64 }

func newSlidingLog(limit, w int64) *slidingLog {
	return &slidingLog{limit: limit, w: w, keys: map[int64]*[]logRun{}}
}

// expire drops the oldest runs while they are at or before now - W (the window is (now-W, now])
// and returns the count left.
func (p *slidingLog) expire(runs *[]logRun, now int64) int64 {
	for len(*runs) > 0 && (*runs)[0].at <= now-p.w {
		*runs = (*runs)[1:]
	}
	var count int64
	for _, r := range *runs {
		count += r.n
	}
	return count
}

func (p *slidingLog) allow(key, cost, now int64) bool {
	runs, ok := p.keys[key]
	if !ok {
		runs = &[]logRun{}
		p.keys[key] = runs
	}
	count := p.expire(runs, now)
	if cost > p.limit-count {
		return false
	}
	if cost > 0 { // cost 0 is admitted and stores nothing
		*runs = append(*runs, logRun{at: now, n: cost})
	}
	return true
}

func (p *slidingLog) retryAfter(key, now int64) int64 {
	runs, ok := p.keys[key]
	if !ok {
		return 0
	}
	if p.expire(runs, now) < p.limit {
		return 0
	}
	return (*runs)[0].at + p.w - now // no extra millisecond: the oldest leaves at exactly that time
}

func (p *slidingLog) probe(_ string, key, now int64) int64 {
	runs, ok := p.keys[key]
	if !ok {
		return 0
	}
	return p.expire(runs, now)
}

func (p *slidingLog) size() int { return len(p.keys) }

// fixedWindow counts per epoch-aligned window; its probes only read.
type fixedWindow struct {
	limit, w int64
	keys     map[int64]*fwState
}

type fwState struct{ start, count int64 }

func newFixedWindow(limit, w int64) *fixedWindow {
	return &fixedWindow{limit: limit, w: w, keys: map[int64]*fwState{}}
}

func (p *fixedWindow) allow(key, cost, now int64) bool {
	start := now - now%p.w
	s, ok := p.keys[key]
	if !ok {
		s = &fwState{start: start}
		p.keys[key] = s
	}
	if s.start != start {
		s.start, s.count = start, 0
	}
	if cost > p.limit-s.count {
		return false
	}
	s.count += cost
	return true
}

func (p *fixedWindow) retryAfter(key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok || s.start != now-now%p.w || s.count < p.limit {
		return 0
	}
	return s.start + p.w - now
}

func (p *fixedWindow) probe(_ string, key, now int64) int64 {
	s, ok := p.keys[key]
	if !ok || s.start != now-now%p.w {
		return 0
	}
	return s.count
}

func (p *fixedWindow) size() int { return len(p.keys) }
