package clock

import (
	"testing"
	"time"
)

var sink int64

// BenchmarkReading compares what a decision pays to read the time: the coarse clock's one atomic
// load against time.Now, whose cost depends on the machine's clock source (a virtual machine
// without a usable TSC pays a system call).
//
//	go test ./clock -run '^$' -bench Reading -count 6
func BenchmarkReading(b *testing.B) {
	b.Run("source=coarse", func(b *testing.B) {
		c := NewCoarse(time.Millisecond)
		defer c.Stop()
		for b.Loop() {
			sink += c.Now()
		}
	})
	b.Run("source=time.Now", func(b *testing.B) {
		for b.Loop() {
			sink += time.Now().UnixMilli()
		}
	})
}
