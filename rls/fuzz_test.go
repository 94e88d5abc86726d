package rls_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/slidelimit/slidelimit/rls"
)

// FuzzParseConfig offers ParseConfig any file. A file it refuses gets a *ConfigError naming the
// file and a reason; a file it accepts builds a server on the default backend, which then
// decides requests for each of its domains without error, as many statuses as descriptors, and
// closes. Every file under testdata is a seed.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.y*ml")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "remote_address", "192.0.2.1", "path", "/", uint32(1))
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), "k", "v", "", "", uint32(0))
	f.Add([]byte("domain: &a d\ndescriptors: [&b {key: *a, descriptors: [*b]}]\n"), "d", "", "d", "", uint32(7))
	f.Fuzz(func(t *testing.T, data []byte, k1, v1, k2, v2 string, hits uint32) {
		cfg, err := rls.ParseConfig("f.yaml", data)
		if err != nil {
			var ce *rls.ConfigError
			if !errors.As(err, &ce) || ce.File != "f.yaml" || ce.Reason == "" {
				t.Fatalf("refused with %#v, not a *ConfigError naming the file and a reason", err)
			}
			return
		}
		srv, err := rls.NewServer(cfg)
		if err != nil {
			t.Fatalf("ParseConfig accepted the file, NewServer refused it: %v", err)
		}
		defer srv.Close()
		for _, domain := range cfg.Domains() {
			req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(k1, v1, k2, v2), desc(k1, v1)}}
			for range 2 {
				resp, err := srv.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatalf("domain %q: %v", domain, err)
				}
				if len(resp.GetStatuses()) != 2 {
					t.Fatalf("domain %q: %d statuses for 2 descriptors", domain, len(resp.GetStatuses()))
				}
				if c := resp.GetOverallCode(); c != rlsv3.RateLimitResponse_OK && c != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("domain %q: overall code %v", domain, c)
				}
			}
		}
	})
}
