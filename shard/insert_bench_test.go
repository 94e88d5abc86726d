package shard

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAbsentKey splits an insert at the layout of a 10M-key engine (256 shards of 39,062
// keys, random hashes) into its lookup and the rest: part=lookup finds a key absent without a
// lock, part=insert also inserts it (the shard's lock, the key count, the stores, the unlock).
// The tables are sized for twice the keys (Config.ExpectedKeys), a load of 0.4, so the probe is
// short and nothing grows: what is left is the cost of the steps themselves on a cache-missing
// slot.
//
//	go test ./shard -run '^$' -bench AbsentKey -benchtime 1000000x -count 6
func BenchmarkAbsentKey(b *testing.B) {
	const shards, per = 256, 10_000_000 / 256
	_, cfg := newShard(b, 10, false)
	cfg.Shift = 8
	cfg.ExpectedKeys = 2 * per
	ss := make([]Shard, shards)
	for i := range ss {
		ss[i].Init(cfg, now)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range shards * per {
		h := r.Uint64() | 1
		ss[h>>56].Acquire(cfg, h, now)
	}
	found := 0
	b.Run("part=lookup", func(b *testing.B) {
		for b.Loop() {
			h := r.Uint64() | 1
			if ss[h>>56].Table().Find(h) != nil {
				found++
			}
		}
	})
	b.Run("part=insert", func(b *testing.B) {
		for b.Loop() {
			h := r.Uint64() | 1
			s := &ss[h>>56]
			if s.Table().Find(h) == nil {
				s.Acquire(cfg, h, now)
			} else {
				found++
			}
		}
	})
	if found > 10 {
		b.Fatalf("%d random keys were found tracked", found)
	}
}
