package policy

// LeakyBucket (as a meter) admits while the bucket, draining at Rate units per second, has room
// for the cost below Capacity. Unlike a token bucket, an idle key banks nothing beyond an empty
// bucket: the policy smooths traffic towards Rate with at most Capacity queued.
//
// A LeakyBucket is a plain value: safe to copy and to share between goroutines.
type LeakyBucket struct {
	Rate     int64 // units drained per second, 1 … MaxLimit
	Capacity int64 // the most units the bucket holds, 1 … MaxLimit
}

// ID returns "leaky-bucket". A constant: safe for concurrent use.
func (LeakyBucket) ID() string { return "leaky-bucket" }

func (LeakyBucket) sealed() {}

// Validate checks Rate and Capacity, each 1 … MaxLimit. A pure function of p: safe for concurrent
// use.
func (p LeakyBucket) Validate() error {
	if err := checkLimit("LeakyBucket.Rate", p.Rate); err != nil {
		return err
	}
	return checkLimit("LeakyBucket.Capacity", p.Capacity)
}
