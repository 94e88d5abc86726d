package trace

import "testing"

// The checkpoints of docs/testing.md: the registry's own first outputs for seeds 1 and 2.
func TestRNGCheckpoints(t *testing.T) {
	r := NewRNG(1)
	for i, want := range []uint32{393288148, 2174103013, 3814759091} {
		if got := r.NextU32(); got != want {
			t.Fatalf("seed 1, output %d: got %d, want %d", i, got, want)
		}
	}
	if got := NewRNG(2).NextU32(); got != 4239540602 {
		t.Fatalf("seed 2, output 0: got %d, want 4239540602", got)
	}
}

func TestNextFloat(t *testing.T) {
	// 393288148 / 2^32, the first seed-1 output scaled by hand.
	if got := NewRNG(1).NextFloat(); got != 393288148.0/4294967296.0 {
		t.Fatalf("NextFloat = %v, want 393288148/2^32", got)
	}
}

func TestNextInt(t *testing.T) {
	// bound 10: threshold (2^32-10) mod 10 = 6, so the first seed-1 output 393288148 is kept: 8.
	if got := NewRNG(1).NextInt(10); got != 8 {
		t.Fatalf("NextInt(10) = %d, want 8", got)
	}
	// bound 2^31+1: threshold 2^31-1, so 393288148 is rejected and the second output,
	// 2174103013, gives 2174103013 - 2147483649 = 26619364.
	r := NewRNG(1)
	if got := r.NextInt(1<<31 + 1); got != 26619364 {
		t.Fatalf("NextInt(2^31+1) = %d, want 26619364", got)
	}
	if got := r.NextU32(); got != 3814759091 {
		t.Fatalf("after one rejection, next output = %d, want the third, 3814759091", got)
	}
	if got := NewRNG(1).NextInt(1); got != 0 {
		t.Fatalf("NextInt(1) = %d, want 0", got)
	}
}

func TestNextIntZeroPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NextInt(0) did not panic")
		}
	}()
	NewRNG(1).NextInt(0)
}

func TestZipfSearchBoundaries(t *testing.T) {
	// n = 3: cum = 1, 1.5, 1.8333…; a target on a boundary belongs to the next rank.
	z, err := NewZipf(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		target float64
		want   int
	}{{0, 0}, {0.999, 0}, {1, 1}, {1.49, 1}, {1.5, 2}, {1.8, 2}} {
		if got := z.rank(c.target); got != c.want {
			t.Errorf("rank(%v) = %d, want %d", c.target, got, c.want)
		}
	}
	// The first seed-1 float, 0.0916, times 1.8333 is 0.168: rank 0.
	if got := z.Sample(NewRNG(1)); got != 0 {
		t.Errorf("Sample = %d, want 0", got)
	}
	one, err := NewZipf(1)
	if err != nil {
		t.Fatal(err)
	}
	if got := one.Sample(NewRNG(7)); got != 0 {
		t.Errorf("n=1: Sample = %d, want 0", got)
	}
}

func TestZipfSampleTakesOneDraw(t *testing.T) {
	z, err := NewZipf(10_000)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRNG(1)
	z.Sample(r)
	if got := r.NextU32(); got != 2174103013 {
		t.Fatalf("after one sample the next output is %d, want the second, 2174103013", got)
	}
}

func TestNewZipfRejectsEmpty(t *testing.T) {
	if _, err := NewZipf(0); err == nil {
		t.Fatal("NewZipf(0) returned no error")
	}
}
