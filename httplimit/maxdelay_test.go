package httplimit

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
)

// waitsThenForever refuses every request: the first time with a short wait, then with the longest
// wait a Duration holds.
type waitsThenForever struct{ calls atomic.Int64 }

func (l *waitsThenForever) Take(_ context.Context, _ string, _ int64) (slidelimit.Decision, error) {
	wait := time.Duration(math.MaxInt64)
	if l.calls.Add(1) == 1 {
		wait = 10 * time.Millisecond
	}
	return slidelimit.Decision{Limit: 1, Reason: slidelimit.ReasonLimited, RetryAfter: wait}, nil
}

// A wait that does not fit in what is left of MaxDelay is refused, however long: the sum of the
// waits once overflowed for a RetryAfter near the longest Duration, and "fitted".
func TestMaxDelayRefusesAWaitPastItAfterAFirstWait(t *testing.T) {
	mw := &Middleware{Limiter: &waitsThenForever{}, MaxDelay: time.Second}
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(w, r)
	if took := time.Since(start); took > time.Second {
		t.Errorf("a wait that cannot fit in MaxDelay 1s was slept: the request returned only when its context ended, after %v", took.Round(time.Millisecond))
	}
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("status %d, want 429", w.Code)
	}
}
