package rls_test

import (
	"strconv"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/stretchr/testify/require"
)

// Twins are found among many descriptors as among few: a request of 60 descriptors, 40 distinct
// addresses and 20 repeats of some of them (past the first 16, where the search changes method),
// decides each address once with its repeats' costs summed.
func TestTwinsAmongManyDescriptors(t *testing.T) {
	s := serve(t, loadGood(t)) // remote_address: 3 a second
	var ds []*ratelimitv3.RateLimitDescriptor
	for i := range 40 {
		ds = append(ds, desc("remote_address", "10.0.0."+strconv.Itoa(i)))
	}
	for i := range 20 {
		ds = append(ds, desc("remote_address", "10.0.0."+strconv.Itoa(20+i%10))) // 20..29, twice each
	}
	r := s.call(t, "basic", 0, ds...)
	require.Equal(t, ok, outcome(r)[0])
	for i, st := range r.GetStatuses() {
		want := uint32(2) // taken once
		if a := i % 40; i >= 40 || a >= 20 && a < 30 {
			want = 0 // taken three times
		}
		require.Equal(t, want, st.GetLimitRemaining(), "descriptor %d", i)
	}
	ds = append(ds, desc("remote_address", "10.0.0.25")) // a fourth: all or nothing refuses it all
	r = s.call(t, "basic", 0, ds...)
	require.Equal(t, over, outcome(r)[0])
	r = s.call(t, "basic", 0, desc("remote_address", "10.0.0.0"))
	require.Equal(t, uint32(1), r.GetStatuses()[0].GetLimitRemaining(), "the refused request took nothing")
}
