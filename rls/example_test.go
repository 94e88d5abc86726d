package rls_test

import (
	"context"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rls"
)

func Example() {
	// About two requests per client address per sliding minute (a sliding window counter).
	cfg, err := rls.ParseConfig("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
`))
	if err != nil {
		panic(err)
	}
	// A manual clock makes the example deterministic; a real server uses the default backend.
	clk := clock.NewManual(1_764_000_000_000)
	defer clk.Stop()
	srv, err := rls.NewServer(cfg, rls.WithBackend(rls.EngineBackend(engine.WithClock(clk))))
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.7"}},
	}}}
	for range 3 {
		resp, _ := srv.ShouldRateLimit(context.Background(), req)
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
	}
	// Output:
	// OK 1 0s
	// OK 0 0s
	// OVER_LIMIT 0 1m0.001s
}

// A config error names the file, the line and the reason.
func ExampleLoadConfig() {
	_, err := rls.LoadConfig("testdata/bad/misspelled_field.yaml")
	fmt.Println(err)
	// Output: testdata/bad/misspelled_field.yaml: line 5: unknown field "ratelimit" in descriptor 1 under the domain (want key, value, rate_limit, descriptors, shadow_mode, detailed_metric, value_to_metric, metadata)
}
