package policy

// TokenBucket holds up to Burst tokens, refilled at Rate tokens per second; a request of cost n
// takes n tokens. A key idle long enough is full again, so a client can bank an idle period and
// spend it in one burst. The refill is exact integer arithmetic: refilling in several steps
// gives the same bucket as one step over the whole span (docs/policies.md).
//
// A TokenBucket is a plain value: safe to copy and to share between goroutines.
type TokenBucket struct {
	Rate  int64 // tokens added per second, 1 … MaxLimit
	Burst int64 // the bucket's size, 1 … MaxLimit
}

// ID returns "token-bucket". A constant: safe for concurrent use.
func (TokenBucket) ID() string { return "token-bucket" }

func (TokenBucket) sealed() {}

// Validate checks Rate and Burst, each 1 … MaxLimit. A pure function of p: safe for concurrent use.
func (p TokenBucket) Validate() error {
	if err := checkLimit("TokenBucket.Rate", p.Rate); err != nil {
		return err
	}
	return checkLimit("TokenBucket.Burst", p.Burst)
}
