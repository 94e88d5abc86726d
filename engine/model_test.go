package engine

import (
	"math/big"
)

// scModel is the sliding window counter written straight from the contract (docs/policies.md
// ("Sliding window counter")), with math/big for every product so that it shares no overflow
// argument with the engine. It never forgets a key.
type scModel struct {
	limit, w int64
	keys     map[uint64]*scKey
}

type scKey struct{ window, current, previous int64 }

func newSCModel(limit, w int64) *scModel {
	return &scModel{limit: limit, w: w, keys: map[uint64]*scKey{}}
}

func (m *scModel) roll(k *scKey, now int64) {
	window := now - now%m.w
	if window != k.window {
		if window == k.window+m.w {
			k.previous = k.current
		} else {
			k.previous = 0
		}
		k.current = 0
		k.window = window
	}
}

// mulDiv returns floor(a*b/c) exactly.
func mulDiv(a, b, c int64) int64 {
	p := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	return p.Quo(p, big.NewInt(c)).Int64()
}

func (m *scModel) estimate(k *scKey, now int64) int64 {
	return mulDiv(k.previous, m.w-(now-k.window), m.w) + k.current
}

// allow is the contract's decision; a new key is created first, even if refused.
func (m *scModel) allow(key uint64, cost, now int64) bool {
	k, ok := m.keys[key]
	if !ok {
		k = &scKey{window: now - now%m.w}
		m.keys[key] = k
	}
	m.roll(k, now)
	if cost == 0 {
		return true
	}
	if m.estimate(k, now)+cost <= m.limit {
		k.current += cost
		return true
	}
	return false
}

// retryAfter is the contract's solved unit retry-after; an unknown key gives 0.
func (m *scModel) retryAfter(key uint64, now int64) int64 {
	k0, ok := m.keys[key]
	if !ok {
		return 0
	}
	k := *k0
	m.roll(&k, now)
	if m.estimate(&k, now) < m.limit {
		return 0
	}
	elapsed := now - k.window
	need := m.limit - k.current - 1
	if need < 0 {
		return k.window + m.w - now + 1
	}
	if k.previous == 0 {
		return 0
	}
	excess := k.previous - need - 1
	if excess < 0 {
		return 0
	}
	target := mulDiv(m.w, excess, k.previous) + 1
	return max(0, target-elapsed)
}

// estimateOf rolls a copy of the key to now and returns its estimate (0 for an unknown key).
func (m *scModel) estimateOf(key uint64, now int64) int64 {
	k0, ok := m.keys[key]
	if !ok {
		return 0
	}
	k := *k0
	m.roll(&k, now)
	return m.estimate(&k, now)
}

// resetAt is the end of now's window.
func (m *scModel) resetAt(now int64) int64 { return now - now%m.w + m.w }
