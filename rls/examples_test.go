package rls_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ratelimit/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var exampleDir = filepath.Join("..", "examples", "envoy")

// The example Envoy config is a valid bootstrap, by Envoy's own generated protos and their
// validation rules, and points both filters at the service.
func TestExampleEnvoyConfigIsValid(t *testing.T) {
	var bs bootstrapv3.Bootstrap
	js := readEnvoyYAML(t, "envoy.yaml", &bs)
	require.NoError(t, bs.ValidateAll())
	require.Contains(t, js, "envoy.filters.network.ratelimit")
	require.Contains(t, js, "envoy.filters.http.ratelimit")
}

// readEnvoyYAML reads the example file name into m, as Envoy reads YAML (through its JSON form,
// which it returns), failing t on a field m does not have.
func readEnvoyYAML(t *testing.T, name string, m proto.Message) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(exampleDir, name))
	require.NoError(t, err)
	var doc any
	require.NoError(t, yaml.Unmarshal(data, &doc))
	js, err := json.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, protojson.Unmarshal(js, m))
	return string(js)
}

// The example cluster for a service run with TLS is a valid Envoy cluster that offers HTTP/2 by
// ALPN, which the service requires.
func TestExampleTLSClusterIsValid(t *testing.T) {
	var c clusterv3.Cluster
	readEnvoyYAML(t, "rls-cluster-tls.yaml", &c)
	require.NoError(t, c.ValidateAll())
	var up tlsv3.UpstreamTlsContext
	require.NoError(t, c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up))
	require.Equal(t, []string{"h2"}, up.GetCommonTlsContext().GetAlpnProtocols())
}

// The example's service config loads, and answers the descriptors the example Envoy sends.
func TestExampleServiceConfig(t *testing.T) {
	cfg, err := rls.LoadConfig(filepath.Join(exampleDir, "rls"))
	require.NoError(t, err)
	require.Equal(t, []string{"edge", "edge_conn"}, cfg.Domains())
	s := serve(t, cfg)
	// The four descriptors the HTTP filter sends for a client on /login with plan pro.
	login := func(path string) []*ratelimitv3.RateLimitDescriptor {
		return []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "192.0.2.1"),
			desc("remote_address", "192.0.2.1", "path", path), desc("remote_address", "192.0.2.1", "login", "/login")}
	}
	r := s.call(t, "edge", 0, append(login("/login"), desc("plan", "pro"))...)
	require.Equal(t, []string{ok, ok, ok, ok, ok}, outcome(r))
	require.Equal(t, uint32(99), r.GetStatuses()[0].GetLimitRemaining())
	require.Equal(t, "per_client_path", r.GetStatuses()[1].GetCurrentLimit().GetName())
	require.Equal(t, "login", r.GetStatuses()[2].GetCurrentLimit().GetName())
	require.Equal(t, uint32(4), r.GetStatuses()[2].GetLimitRemaining())
	require.Equal(t, uint32(49), r.GetStatuses()[3].GetLimitRemaining())
	// Four more logins, each with a query string of its own, use the bucket's burst: the query
	// keys each path apart, but not the login; the sixth waits a second for a token, and is not
	// counted against the per-client limit.
	for i := range 4 {
		s.call(t, "edge", 0, login(fmt.Sprintf("/login?try=%d", i))...)
	}
	r = s.call(t, "edge", 0, login("/login?try=4")...)
	require.Equal(t, []string{over, ok, ok, over}, outcome(r))
	require.Equal(t, time.Second, r.GetStatuses()[2].GetDurationUntilReset().AsDuration())
	require.Equal(t, uint32(95), r.GetStatuses()[0].GetLimitRemaining())
	// Another path: 10 per 10 seconds.
	r = s.call(t, "edge", 0, desc("remote_address", "192.0.2.1", "path", "/"))
	require.Equal(t, uint32(9), r.GetStatuses()[0].GetLimitRemaining())
	require.Equal(t, uint32(10), r.GetStatuses()[0].GetCurrentLimit().GetUnitMultiplier().GetValue())
	// The network filter's descriptor.
	r = s.call(t, "edge_conn", 0, desc("listener", "ingress"))
	require.Equal(t, uint32(199), r.GetStatuses()[0].GetLimitRemaining())
}
