package policy

// GCRA is the generic cell rate algorithm: the token bucket's decisions from one 64-bit
// theoretical arrival time per key. With the same Rate and Burst, GCRA and TokenBucket admit and
// refuse exactly the same requests and report the same figures whenever time does not run
// backwards, except for a cost above Burst; on a time earlier than a key's last admission GCRA is
// the stricter of the two. A request that costs more than Burst is refused before the key is
// looked up, creating no state, so its Decision reports no Remaining and no ResetAt (TokenBucket
// reads the key and reports both).
//
// A GCRA is a plain value: safe to copy and to share between goroutines.
type GCRA struct {
	Rate  int64 // permits per second, 1 … MaxLimit
	Burst int64 // permits that may be taken at once, 1 … MaxLimit
}

// ID returns "gcra". A constant: safe for concurrent use.
func (GCRA) ID() string { return "gcra" }

func (GCRA) sealed() {}

// Validate checks Rate and Burst, each 1 … MaxLimit. A pure function of p: safe for concurrent use.
func (p GCRA) Validate() error {
	if err := checkLimit("GCRA.Rate", p.Rate); err != nil {
		return err
	}
	return checkLimit("GCRA.Burst", p.Burst)
}
