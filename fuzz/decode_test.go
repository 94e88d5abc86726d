package fuzz

import (
	"fmt"
	"math"
	"strings"
)

// The input format. Every byte string decodes to something (reading past the end yields zeros),
// and each value is a class byte followed by the class's payload, so that the fuzzer's byte
// mutations move between the interesting classes (the extremes, the window edges, exactly what is
// left) instead of wandering through uniform noise. seeds_test.go encodes the same format.
//
// serial input:  flags seed count(p1) count(p2) start op*
// flags:         bit 0 eviction on; bits 1-3 log2 of the number of shards (1 … 128)
// op:            head step [cost, for allow]
// head:          bits 0-2 the call (0-3, 7 allow; 4 retryAfter; 5 a probe; 6 stateSize),
//                bits 3-5 the key (index into keys), bit 6 which probe (the dual bucket has two)

// maxNow caps the clock at the engine's supported range, [0, 2^62) ms (the reference model is
// exact up to 2^62 ms; the engine's two-word cells keep a time below the flag bits). A step that would pass it
// stops there, so time never goes backwards.
const maxNow = 1<<62 - 1

// maxOps bounds the operations one input runs, keeping each execution cheap.
const maxOps = 256

// keys are the integer keys an op can name: small ones, 2^63 and 2^64-1 (the engine's integer keys
// are uint64; the model's are int64 with the same bits). Eight, so that one shard's table fills
// and is rebuilt, which is where the engine drops dead keys without its background sweeper.
var keys = [8]int64{0, 1, 2, 3, 4, 5, math.MinInt64, -1}

// keyOf is the key a head byte names (bits 3-5).
func keyOf(head byte) int64 { return keys[(head>>3)&7] }

// keyName is how a failure report names a key.
func keyName(k int64) string {
	switch k {
	case -1:
		return "2^64-1"
	case math.MinInt64:
		return "2^63"
	}
	return fmt.Sprint(k)
}

type reader struct {
	b []byte
	i int
}

func (r *reader) more() bool { return r.i < len(r.b) }

func (r *reader) u8() byte {
	if r.i >= len(r.b) {
		return 0
	}
	v := r.b[r.i]
	r.i++
	return v
}

func (r *reader) u16() int64 { return int64(r.u8()) | int64(r.u8())<<8 }
func (r *reader) u32() int64 { return r.u16() | r.u16()<<16 }

// roundCounts are the values people configure.
var roundCounts = [...]int64{10, 60, 100, 1000, 60_000, 1_000_000, 3_600_000, 86_400_000}

// Count classes (class byte mod 8).
const (
	countTiny   = iota // 1 + payload%8
	countByte          // 1 + payload
	countU16           // 1 + u16
	countU32           // u32, clamped to [1, hi]
	countNearHi        // hi - payload%8
	countPow2          // 2^(payload%33), then -1, 0 or +1 by the class byte's bits 3-4
	countRound         // one of roundCounts
	countHi            // hi
)

// count decodes a parameter in [1, hi].
func (r *reader) count(hi int64) int64 {
	c := r.u8()
	var v int64
	switch c % 8 {
	case countTiny:
		v = 1 + int64(r.u8()%8)
	case countByte:
		v = 1 + int64(r.u8())
	case countU16:
		v = 1 + r.u16()
	case countU32:
		v = r.u32()
	case countNearHi:
		v = hi - int64(r.u8()%8)
	case countPow2:
		v = int64(1)<<(r.u8()%33) + int64((c>>3)%3) - 1
	case countRound:
		v = roundCounts[int(r.u8())%len(roundCounts)]
	case countHi:
		v = hi
	}
	return min(max(v, 1), hi)
}

// epoch is a recent Unix time in ms, where real clocks are.
const epoch = 1_700_000_000_000

// Start classes (class byte mod 6).
const (
	startZero      = iota // 0
	startEpoch            // epoch + u16
	startEdgeMinus        // the last ms before the first period edge after epoch
	startU32              // u32
	startFar              // 2^41 + u16
	startHuge             // 2^61: far beyond any real clock, still exact in the model
)

func (r *reader) start(period int64) int64 {
	switch r.u8() % 6 {
	case startEpoch:
		return epoch + r.u16()
	case startEdgeMinus:
		return (epoch/period+1)*period - 1
	case startU32:
		return r.u32()
	case startFar:
		return 1<<41 + r.u16()
	case startHuge:
		return 1 << 61
	}
	return 0
}

// Step classes (class byte mod 10).
const (
	stepZero      = iota // 0
	stepSmall            // 1 + payload%16
	stepEdge             // to the next period edge (a multiple of the period since the epoch)
	stepEdgeMinus        // to 1 ms before it
	stepEdgePlus         // to 1 ms after it
	stepPeriods          // k periods (k = 1 + payload%3) plus -1, 0 or +1 ms (payload%3 - 1)
	stepPast31           // 2^31 + u16: past every int32 and every 31-bit packing
	stepU32              // u32
	stepShift            // period << (payload%33): far multi-period jumps, past packed horizons
	stepRetry            // the model's retryAfter for the op's key, plus -1, 0 or +1 ms
	numSteps
)

var stepNames = [numSteps]string{"0", "small", "edge", "edge-1", "edge+1", "periods", "past 2^31", "u32", "shift", "retryAfter"}

// step decodes how far the clock moves before an op. period is the target's; retry returns the
// model's retryAfter for the op's key at the current time. The result never takes now past maxNow.
func (r *reader) step(now, period int64, retry func() int64) (int64, int) {
	c := int(r.u8() % numSteps)
	next := now - now%period + period
	var d int64
	switch c {
	case stepSmall:
		d = 1 + int64(r.u8()%16)
	case stepEdge:
		d = next - now
	case stepEdgeMinus:
		d = next - 1 - now
	case stepEdgePlus:
		d = next + 1 - now
	case stepPeriods:
		k := 1 + int64(r.u8()%3)
		d = k*period + int64(r.u8()%3) - 1
	case stepPast31:
		d = 1<<31 + r.u16()
	case stepU32:
		d = r.u32()
	case stepShift:
		s := r.u8() % 33
		d = maxNow
		if period <= maxNow>>s {
			d = period << s
		}
	case stepRetry:
		d = max(0, retry()+int64(r.u8()%3)-1)
	}
	return min(d, maxNow-now), c
}

// Cost classes (class byte mod 12).
const (
	costZero      = iota // 0
	costOne              // 1
	costSmall            // 2 + payload%4
	costLeft             // exactly what is left (target.remaining)
	costLeftPlus         // one more than is left
	costLeftMinus        // one less than is left (at least 0)
	costCap              // the policy's capacity (target.capacity)
	costCapPlus          // one more: never admitted
	costU32              // u32
	costMax              // math.MaxInt64
	costNeg              // -1, or math.MinInt64 when the class byte's top bit is set
	costOne2             // 1 again: unit requests are the common case
	numCosts
)

func (r *reader) cost(capacity int64, left func() int64) (int64, int) {
	b := r.u8()
	c := int(b % numCosts)
	switch c {
	case costZero:
		return 0, c
	case costSmall:
		return 2 + int64(r.u8()%4), c
	case costLeft:
		return max(left(), 0), c
	case costLeftPlus:
		return max(left(), 0) + 1, c
	case costLeftMinus:
		return max(left()-1, 0), c
	case costCap:
		return capacity, c
	case costCapPlus:
		return capacity + 1, c
	case costU32:
		return r.u32(), c
	case costMax:
		return math.MaxInt64, c
	case costNeg:
		if b&0x80 != 0 {
			return math.MinInt64, c
		}
		return -1, c
	}
	return 1, c // costOne, costOne2
}

// Op calls (head byte mod 8).
const (
	callRetry = 4
	callProbe = 5
	callSize  = 6
)

// op is one decoded operation and what the model answered, kept for failure reports.
type op struct {
	call string // "allow", "retryAfter", "stateSize" or a probe name
	key  int64
	cost int64
	now  int64
	step int64
	want string // the model's answer
}

func (o op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "+%d ms (now %d): %s", o.step, o.now, o.call)
	switch o.call {
	case "allow":
		fmt.Fprintf(&b, "(key %s, cost %d)", keyName(o.key), o.cost)
	case "stateSize":
		b.WriteString("()")
	case "concurrent":
		b.WriteString(" phase: the clock stops here")
	default:
		fmt.Fprintf(&b, "(key %s)", keyName(o.key))
	}
	if o.want != "" {
		b.WriteString(" -> model " + o.want)
	}
	return b.String()
}
