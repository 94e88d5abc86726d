package policy

// DualBucket is two token buckets sharing one clock: each call spends one request out of
// RequestsPerMin and cost tokens out of TokensPerMin (for example, API calls and model tokens per
// minute). Both start full, refill continuously over a minute and saturate at their capacity; a
// call is admitted only when both have enough, and then spends from both.
//
// Costs are counted in tokens: a decision's limit is TokensPerMin and its remaining figure is the
// tokens the next call could spend (0 while no request is available); a cost above TokensPerMin
// can never be admitted. The request dimension is reported by the engine's Inspect, in
// Probe.Requests.
//
// A DualBucket is a plain value: safe to copy and to share between goroutines.
type DualBucket struct {
	RequestsPerMin int64 // requests per minute and the request bucket's size, 1 … MaxLimit
	TokensPerMin   int64 // tokens per minute and the token bucket's size, 1 … MaxLimit
}

// ID returns "dual-bucket". A constant: safe for concurrent use.
func (DualBucket) ID() string { return "dual-bucket" }

func (DualBucket) sealed() {}

// Validate checks RequestsPerMin and TokensPerMin, each 1 … MaxLimit. A pure function of p: safe
// for concurrent use.
func (p DualBucket) Validate() error {
	if err := checkLimit("DualBucket.RequestsPerMin", p.RequestsPerMin); err != nil {
		return err
	}
	return checkLimit("DualBucket.TokensPerMin", p.TokensPerMin)
}
