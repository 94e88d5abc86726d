package redisstore

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/policy"
)

// Beside a limit that can give units back, a Redis sliding log or dual bucket (whose Refund gives
// nothing back) is asked last by httplimit, so that requests the other limit refuses consume
// nothing of it: the middleware's all-or-nothing rule with one limit that cannot give back.
func TestMiddlewareAsksLimitsThatCannotGiveBackLast(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingLog{Limit: 10, Window: time.Minute},
		policy.DualBucket{RequestsPerMin: 10, TokensPerMin: 10},
	} {
		t.Run(p.ID(), func(t *testing.T) {
			c := newClient(t, testAddr)
			store, err := New(c, "mw", p)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			fw, err := engine.New(policy.FixedWindow{Limit: 2, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer fw.Close()
			mw := &httplimit.Middleware{
				Limiter: store, Quota: httplimit.Quota{Name: "store"},
				Limits: []httplimit.Limit{{Limiter: httplimit.Local(fw), Quota: httplimit.Quota{Name: "fw"}}},
			}
			srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			defer srv.Close()
			var codes []int
			for range 5 {
				res, err := srv.Client().Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				codes = append(codes, res.StatusCode)
			}
			if want := []int{200, 200, 429, 429, 429}; !slices.Equal(codes, want) {
				t.Fatalf("statuses %v, want %v", codes, want)
			}
			// Two requests admitted by both: 10 - 2 = 8 left; the three the fixed window refused
			// took nothing.
			d, err := store.Take(context.Background(), "ip:127.0.0.1", 0)
			if err != nil || d.Remaining != 8 {
				t.Fatalf("%s after 2 admitted and 3 refused requests: Remaining %d (%v), want 8", p.ID(), d.Remaining, err)
			}
		})
	}
}
