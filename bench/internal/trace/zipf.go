package trace

import "fmt"

// Zipf samples ranks 0 … n-1 with probability proportional to 1/(k+1) (alpha = 1); rank 0 is the
// most popular. The cumulative weights are summed in float64 in ascending order, exactly as the
// registry does, so a sample maps to the same key in every port. A Zipf is read-only after
// NewZipf and may be shared between goroutines, each sampling with its own RNG.
type Zipf struct {
	cum   []float64
	total float64
}

// NewZipf returns a sampler over n ranks. n must be at least 1.
func NewZipf(n int) (*Zipf, error) {
	if n < 1 {
		return nil, fmt.Errorf("trace: NewZipf: n = %d must be at least 1", n)
	}
	z := &Zipf{cum: make([]float64, n)}
	sum := 0.0
	for k := range n {
		sum += 1 / float64(k+1)
		z.cum[k] = sum
	}
	z.total = z.cum[n-1]
	return z, nil
}

// N returns the number of ranks.
func (z *Zipf) N() int { return len(z.cum) }

// Sample draws one rank using exactly one NextFloat from r. It only reads z, so goroutines may
// share z as long as each samples with its own RNG.
func (z *Zipf) Sample(r *RNG) int {
	return z.rank(r.NextFloat() * z.total)
}

// rank returns the rank whose cumulative span holds target.
func (z *Zipf) rank(target float64) int {
	// The first k whose cumulative weight exceeds target; a target equal to a boundary goes up,
	// which the registry's search pins and a library search (sort.Search) would not make obvious.
	lo, hi := 0, len(z.cum)-1
	for lo < hi {
		mid := (lo + hi) >> 1
		if z.cum[mid] > target {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
