package httplimit

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
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

// Closing StopWaiting refuses a request waiting under MaxDelay at once (429 with Retry-After),
// and a request arriving after it is refused without waiting.
func TestStopWaitingRefusesTheWaitingRequests(t *testing.T) {
	stop := make(chan struct{})
	mw := &Middleware{Limiter: waitsLong{}, MaxDelay: time.Hour, StopWaiting: stop}
	served := atomic.Int64{}
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	serve := func() chan *httptest.ResponseRecorder {
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			done <- w
		}()
		return done
	}
	first := serve()
	for h.(*handler).waiting.Len() != 1 {
		select {
		case w := <-first:
			t.Fatalf("the request was answered %d without waiting", w.Code)
		case <-time.After(time.Millisecond):
		}
	}
	close(stop)
	for i, done := range []chan *httptest.ResponseRecorder{first, serve()} {
		select {
		case w := <-done:
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
				t.Errorf("request %d after StopWaiting closed: %d, Retry-After %q; want 429 with Retry-After", i, w.Code, w.Header().Get("Retry-After"))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d still waits 10s after StopWaiting was closed", i)
		}
	}
	if served.Load() != 0 || h.(*handler).waiting.Len() != 0 {
		t.Errorf("%d requests served, %d still counted as waiting; want 0 and 0", served.Load(), h.(*handler).waiting.Len())
	}
}

// waitsLong refuses every request with a wait of a minute.
type waitsLong struct{}

func (waitsLong) Take(context.Context, string, int64) (slidelimit.Decision, error) {
	return slidelimit.Decision{Limit: 1, Reason: slidelimit.ReasonLimited, RetryAfter: time.Minute}, nil
}

// refusesUntil refuses every request until a fixed instant, with the wait that is left.
type refusesUntil struct{ until time.Time }

func (l refusesUntil) Take(context.Context, string, int64) (slidelimit.Decision, error) {
	left := time.Until(l.until)
	if left <= 0 {
		return slidelimit.Decision{Allowed: true, Limit: 1}, nil
	}
	return slidelimit.Decision{Limit: 1, Reason: slidelimit.ReasonLimited, RetryAfter: left}, nil
}

// A request let go by StopWaiting after waiting 1.1 s of a 3 s turn is told what is left (2 s),
// not the 3 s of the decision taken before it waited.
func TestStopWaitingRefusesWithAFreshRetryAfter(t *testing.T) {
	stop := make(chan struct{})
	mw := &Middleware{Limiter: refusesUntil{until: time.Now().Add(3 * time.Second)}, MaxDelay: 10 * time.Second, StopWaiting: stop}
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		done <- w
	}()
	time.Sleep(1100 * time.Millisecond)
	close(stop)
	w := <-done
	if ra := w.Header().Get("Retry-After"); w.Code != http.StatusTooManyRequests || ra != "2" && ra != "1" {
		t.Errorf("after waiting 1.1 s of a 3 s turn: %d, Retry-After %q; want 429 with Retry-After 2 (or 1)", w.Code, ra)
	}
}

// Middlewares given one Waiting share MaxWaiting's count: with one request waiting under the
// first, a request to the second (MaxWaiting 1) is refused at once, where one with a count of its
// own waits.
func TestSharedWaitingBoundsEveryMiddleware(t *testing.T) {
	for _, shared := range []bool{true, false} {
		stop := make(chan struct{})
		w := new(Waiting)
		mw := func() http.Handler {
			m := &Middleware{Limiter: waitsLong{}, MaxDelay: time.Hour, MaxWaiting: 1, StopWaiting: stop}
			if shared {
				m.Waiting = w
			}
			return m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		}
		old, replaced := mw(), mw()
		serve := func(h http.Handler) chan int {
			done := make(chan int, 1)
			go func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				done <- rec.Code
			}()
			return done
		}
		first := serve(old)
		deadline := time.After(10 * time.Second)
		for old.(*handler).waiting.Len() != 1 {
			select {
			case code := <-first:
				t.Fatalf("the first request was answered %d without waiting", code)
			case <-deadline:
				t.Fatal("the first request never waited")
			case <-time.After(time.Millisecond):
			}
		}
		second := serve(replaced)
		select {
		case code := <-second:
			if !shared {
				t.Errorf("with counts of their own, the second middleware answered %d without waiting", code)
			} else if code != http.StatusTooManyRequests {
				t.Errorf("shared: the second middleware answered %d, want 429", code)
			}
		case <-time.After(200 * time.Millisecond):
			if shared {
				t.Errorf("shared: the second middleware's request waits while the first one's does, past MaxWaiting 1")
			}
		}
		if shared && w.Len() != 1 {
			t.Errorf("shared: Waiting.Len() = %d, want 1", w.Len())
		}
		close(stop)
		<-first
	}
}

// slowShortWaits refuses every request with a wait of a microsecond, each decision taking 5 ms
// (a slow store): until its admitAt-th call, which it admits.
type slowShortWaits struct {
	calls   atomic.Int64
	admitAt int64
}

func (l *slowShortWaits) Take(_ context.Context, _ string, _ int64) (slidelimit.Decision, error) {
	time.Sleep(5 * time.Millisecond)
	if l.calls.Add(1) >= l.admitAt {
		return slidelimit.Decision{Allowed: true, Limit: 1}, nil
	}
	return slidelimit.Decision{Limit: 1, Reason: slidelimit.ReasonLimited, RetryAfter: time.Microsecond}, nil
}

// MaxDelay bounds the time that passes, not the sum of the waits the limits ask for: waits of a
// microsecond, each followed by a decision of 5 ms, once added up to 50 ms only after 50,000
// decisions (over four minutes). Within 50 ms of real time there is room for about ten
// decisions of 5 ms, however fast the machine, so the 30th, which would admit, is never made.
func TestMaxDelayBoundsTheTimeThatPasses(t *testing.T) {
	lim := &slowShortWaits{admitAt: 30}
	mw := &Middleware{Limiter: lim, MaxDelay: 50 * time.Millisecond}
	w := httptest.NewRecorder()
	mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("status %d, want 429", w.Code)
	}
	if n := lim.calls.Load(); n > 12 {
		t.Errorf("%d decisions within a MaxDelay of 50ms, each taking 5ms: want at most 12", n)
	}
}

// TestWaitingNeverCountsARefusedRequest: a request refused a place among the waiters is never
// counted in Waiting, even for a moment, so Len never reports more than the bound, and a
// middleware with a higher bound sharing the count always finds the room it has. Taking the
// place with an add given back when over the bound broke both: Len read 3 or more with a bound
// of 2, and the higher bound was refused while it had room.
func TestWaitingNeverCountsARefusedRequest(t *testing.T) {
	w := new(Waiting)
	low := &handler{waiting: w, maxWaiting: 3}
	high := &handler{waiting: w, maxWaiting: 5}
	for range 3 {
		if !low.startWaiting() {
			t.Fatal("startWaiting refused below its bound")
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if low.startWaiting() {
					t.Error("startWaiting admitted a fourth waiter under a bound of 3")
					return
				}
			}
		}()
	}
	var most int64
	refusedHigh := 0
	for range 200_000 {
		if n := w.Len(); n > most {
			most = n
		}
		// The count is 3, and at most this one high waiter more: always room under 5.
		if high.startWaiting() {
			w.n.Add(-1)
		} else {
			refusedHigh++
		}
	}
	stop.Store(true)
	wg.Wait()
	if most > 3 {
		t.Errorf("Waiting.Len() read %d while 3 requests waited and every other was refused", most)
	}
	if refusedHigh > 0 {
		t.Errorf("a middleware with a bound of 5 was refused %d times while 3 requests waited", refusedHigh)
	}
}
