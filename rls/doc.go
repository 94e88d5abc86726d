// Package rls is Envoy's global rate limit service (envoy.service.ratelimit.v3.RateLimitService)
// on slidelimit's exact limiters: sliding windows by default, decided in process or on Redis.
//
// A Config is read from envoyproxy/ratelimit's YAML format, one domain per file, with two
// additions to each rate_limit: window (any duration, instead of unit) and policy (any engine
// policy that can give units back; the sliding counter by default). A Server answers
// ShouldRateLimit from it: the most specific descriptor of the config matches, a request refused
// on any descriptor consumes nothing on any of them, and each status carries the limit, what is
// left and the exact time until the refused hit would be admitted. Serve runs it over gRPC with
// the health service; Watch applies edits to the files while it runs. docs/rls.md describes the
// format, the semantics and the metrics.
package rls
