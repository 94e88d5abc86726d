package cases

import "testing"

// The checkpoints of docs/testing.md: seed 1 gives 393288148, 2174103013, 3814759091; seed 2 starts
// 4239540602.
func TestRNGCheckpoints(t *testing.T) {
	r := newRNG(1)
	for i, want := range []uint32{393288148, 2174103013, 3814759091} {
		if got := r.next(); got != want {
			t.Fatalf("seed 1 draw %d = %d, want %d", i, got, want)
		}
	}
	if got := newRNG(2).next(); got != 4239540602 {
		t.Fatalf("seed 2 draw 0 = %d, want 4239540602", got)
	}
}
