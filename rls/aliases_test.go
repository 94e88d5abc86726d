package rls_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
)

// A config that shares its limits through anchors, aliases and merge keys decides as the same
// config written out in full, as envoyproxy/ratelimit's YAML decoding would load it.
func TestAliasesLoadAsWrittenOut(t *testing.T) {
	shared := `
domain: d
descriptors:
  - key: a
    rate_limit: &strict {unit: second, requests_per_unit: 2}
  - &base
    key: plan
    value: base
    rate_limit: {unit: second, requests_per_unit: 1}
  - <<: *base
    value: free
  - <<: [*base]
    value: paid
    rate_limit: {unit: second, requests_per_unit: 3}   # overrides the merged one
  - key: nested
    descriptors: &kids
      - key: leaf
        rate_limit: *strict
  - key: nested2
    descriptors: *kids
`
	full := `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: plan
    value: base
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: plan
    value: free
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: plan
    value: paid
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: nested
    descriptors:
      - key: leaf
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: nested2
    descriptors:
      - key: leaf
        rate_limit: {unit: second, requests_per_unit: 2}
`
	a, b := serve(t, parse(t, shared)), serve(t, parse(t, full))
	reqs := [][]string{
		{"a", "x"}, {"plan", "base"}, {"plan", "free"}, {"plan", "paid"},
		{"nested", "n", "leaf", "l"}, {"nested2", "n", "leaf", "l"},
	}
	admitted := 0
	for range 4 {
		for _, r := range reqs {
			got, want := outcome(a.call(t, "d", 0, desc(r...))), outcome(b.call(t, "d", 0, desc(r...)))
			require.Equal(t, want, got, "request %v", r)
			if got[0] == ok {
				admitted++
			}
		}
	}
	// 2 + 1 + 1 + 3 + 2 + 2 of the 24 requests: the limits apply, each with its own count.
	require.Equal(t, 11, admitted)
}

// Aliases that loop or multiply past any real config's size are refused with the line, not
// followed until the process runs out of stack or memory.
func TestAliasesBounded(t *testing.T) {
	_, err := rls.ParseConfig("loop.yaml", []byte("domain: d\ndescriptors: &l\n  - key: a\n    descriptors: *l\n"))
	require.EqualError(t, err, "loop.yaml: line 4: alias *l refers to a node that contains it")

	var laughs strings.Builder
	laughs.WriteString("domain: d\nl0: &l0 [x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		laughs.WriteString("l" + string(rune('0'+i)) + ": &l" + string(rune('0'+i)) + " [")
		for j := range 8 {
			if j > 0 {
				laughs.WriteString(", ")
			}
			laughs.WriteString("*l" + string(rune('0'+i-1)))
		}
		laughs.WriteString("]\n")
	}
	_, err = rls.ParseConfig("laughs.yaml", []byte(laughs.String()))
	require.ErrorContains(t, err, "aliases add more than 1048576 YAML nodes to the file")

	// The bound is on what aliases add: a file that writes more nodes than that, and uses no
	// alias, loads.
	var wide strings.Builder
	wide.WriteString("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: {m: [")
	for i := range 1<<20 + 1000 {
		if i > 0 {
			wide.WriteString(",")
		}
		wide.WriteString("1")
	}
	wide.WriteString("]}\n")
	_, err = rls.ParseConfig("wide.yaml", []byte(wide.String()))
	require.NoError(t, err)

	_, err = rls.ParseConfig("merge.yaml", []byte("domain: d\ndescriptors:\n  - <<: [a, b]\n    key: k\n"))
	require.EqualError(t, err, `merge.yaml: line 3: the merge key << is given the str "a", want a map or a list of maps`)

	// As in yaml.v2, a list of maps merged through an alias is refused: it must be written in place.
	_, err = rls.ParseConfig("merge.yaml", []byte("domain: d\ndescriptors:\n  - key: h\n    descriptors: &l\n      - key: q\n  - key: a\n    <<: *l\n"))
	require.EqualError(t, err, `merge.yaml: line 7: the merge key << is given an alias to a list, want a map (a list of maps must be written in place)`)

	// Large maps merged into each other load: with an index, in a fraction of a second (40,000
	// fields each way took 15 s when each key was found by a scan).
	var big strings.Builder
	big.WriteString("domain: d\ndescriptors:\n  - key: k\n    metadata:\n      m:\n")
	for i := range 40000 {
		fmt.Fprintf(&big, "        f%d: 1\n", i)
	}
	big.WriteString("      <<:\n        m:\n")
	for i := range 40000 {
		fmt.Fprintf(&big, "          f%d: 2\n", i)
	}
	_, err = rls.ParseConfig("big.yaml", []byte(big.String()))
	require.NoError(t, err)
}

// Merge keys apply as envoyproxy/ratelimit's YAML library applies them when it decodes: in
// document order (a field written before << is overwritten by the merged one), the first map of a
// merge list winning, and a map set over a map combining with it field by field. An alias may
// also stand for a field name.
func TestMergeKeysAsEnvoyLoadsThem(t *testing.T) {
	s := serve(t, parse(t, `
domain: d
descriptors:
  - key: holder
    metadata:                       # accepted and unused: a place for anchors
      base: &base {key: m, rate_limit: {unit: hour, requests_per_unit: 4}}
      x: &x {rate_limit: {unit: hour, requests_per_unit: 2}}
      y: &y {rate_limit: {unit: hour, requests_per_unit: 3}}
  - key: a
    rate_limit: &rl {unit: hour, requests_per_unit: 5}
  - key: b
    rate_limit:
      requests_per_unit: 10
      <<: *rl                       # after the field: the merged 5 wins
  - key: c                          # overwritten by the merged key: m
    <<: *base
    rate_limit: {requests_per_unit: 7}   # combined with the merged one: 7 an hour
  - key: e
    <<: [*x, *y]                    # the first map of the list wins: 2 an hour
  - &k key: f
    rate_limit: {unit: hour, requests_per_unit: 1}
  - *k : g                          # an alias as a field name: key g
    rate_limit: {unit: hour, requests_per_unit: 6}
`))
	for key, want := range map[string]int{"a": 5, "b": 5, "m": 7, "c": 10, "e": 2, "f": 1, "g": 6} {
		admitted := 0
		for range 10 {
			if outcome(s.call(t, "d", 0, desc(key, "v")))[0] == ok {
				admitted++
			}
		}
		require.Equal(t, want, admitted, "descriptor %s: admitted of 10", key)
	}
}
