package peers

import (
	"fmt"
	"math/rand/v2"
	"unsafe"
)

// A Workload is a fixed sequence of keys, laid out in the order they are requested so that
// reading the next key streams through memory: the harness then costs every limiter the same
// few nanoseconds and, unlike a random index into a table of keys, adds no cache miss of its own
// (a server has the key it limits by in cache, having just parsed it).
//
// A Workload is immutable after construction and safe for concurrent use.
type Workload struct {
	// Name is the benchmark name's keys= value: "1", "1M-uniform", "1M-zipf".
	Name string
	// Keys is the number of distinct keys the workload draws from.
	Keys int

	// recs holds one 16-byte record per request: the key's length, then its bytes.
	recs []byte
	mask uint64
}

const recSize = 16

// Key returns the key of request i (i wraps around the sequence). The string points into the
// workload's records and stays valid as long as the Workload is reachable.
func (w *Workload) Key(i uint64) string {
	r := w.recs[(i&w.mask)*recSize:][:recSize]
	return unsafe.String(&r[1], int(r[0]))
}

// Len returns the length of the sequence before it repeats.
func (w *Workload) Len() int { return int(w.mask + 1) }

// HotKey is the one-hot-key workload: every request is for key 0.
func HotKey() *Workload {
	w := &Workload{Name: "1", Keys: 1, recs: make([]byte, recSize)}
	w.put(0, 0)
	return w
}

// Uniform returns a workload of 2^seqLog2 requests drawn uniformly from keys distinct keys, with
// a fixed seed.
func Uniform(name string, keys int, seqLog2 uint) *Workload {
	r := rand.New(rand.NewPCG(1, 2))
	return build(name, keys, seqLog2, func() uint32 { return uint32(r.IntN(keys)) })
}

// Zipf returns a workload of 2^seqLog2 requests over keys distinct keys whose popularity follows
// Zipf's law with exponent s (> 1): key 0 is the most requested, with a fixed seed. With
// s = 1.1 over 1M keys the top key receives about 12% of the requests and the top 1000 about
// half, as client traffic does.
func Zipf(name string, keys int, s float64, seqLog2 uint) *Workload {
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), s, 1, uint64(keys-1))
	return build(name, keys, seqLog2, func() uint32 { return uint32(z.Uint64()) })
}

func build(name string, keys int, seqLog2 uint, next func() uint32) *Workload {
	if keys < 1 || keys > MaxKeys {
		panic(fmt.Sprintf("peers: workload %q: keys = %d out of range [1, %d]", name, keys, MaxKeys))
	}
	n := uint64(1) << seqLog2
	w := &Workload{Name: name, Keys: keys, recs: make([]byte, n*recSize), mask: n - 1}
	for i := range n {
		w.put(i, next())
	}
	return w
}

func (w *Workload) put(i uint64, key uint32) {
	r := w.recs[i*recSize:][:recSize]
	k := AppendKey(r[1:1:recSize], key)
	r[0] = byte(len(k))
}

// Fresh returns a workload of 2^seqLog2 distinct keys in order, none of which AppendKey makes
// (they are its keys moved to 11.0.0.0/8), so that every request of a pass over it brings a key
// new to any limiter that has seen only AppendKey's keys. seqLog2 is at most 24.
func Fresh(name string, seqLog2 uint) *Workload {
	if seqLog2 > 24 {
		panic(fmt.Sprintf("peers: workload %q: seqLog2 = %d above 24", name, seqLog2))
	}
	n := uint64(1) << seqLog2
	w := &Workload{Name: name, Keys: int(n), recs: make([]byte, n*recSize), mask: n - 1}
	for i := range n {
		w.put(i, uint32(i))
		w.recs[i*recSize+2] = '1' // "10." becomes "11."
	}
	return w
}
