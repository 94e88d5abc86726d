package main

import (
	"sync"
	"time"
)

// mutexMapLimiter is the reference the built-in benchmark measures slidelimit against: the
// sliding window counter as a service might first write it, a map of per-key counters behind one
// sync.Mutex, reading time.Now for every decision and never forgetting a key. Its rules are the
// engine's (floored carry, two-window gap, ties admit), so that both make the same decisions and
// differ only in how they get there.
type mutexMapLimiter struct {
	limit, windowMs int64

	mu   sync.Mutex
	keys map[uint64]*mutexMapState
}

type mutexMapState struct {
	window, previous, current int64
}

func newMutexMapLimiter(limit, windowMs int64, sizeHint int) *mutexMapLimiter {
	return &mutexMapLimiter{limit: limit, windowMs: windowMs, keys: make(map[uint64]*mutexMapState, sizeHint)}
}

// allow decides one unit for key k now; safe for concurrent use (every call takes the mutex).
func (l *mutexMapLimiter) allow(k uint64) bool {
	now := time.Now().UnixMilli()
	w := l.windowMs
	start := now - now%w
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[k]
	if s == nil {
		s = &mutexMapState{window: start}
		l.keys[k] = s
	}
	if start != s.window {
		if start == s.window+w {
			s.previous = s.current
		} else {
			s.previous = 0
		}
		s.current, s.window = 0, start
	}
	carried := s.previous * (w - (now - start)) / w
	if carried+s.current+1 > l.limit {
		return false
	}
	s.current++
	return true
}

// len returns the number of keys the map holds; safe for concurrent use.
func (l *mutexMapLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
