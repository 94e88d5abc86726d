package policy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDualBucketValidate(t *testing.T) {
	if err := (DualBucket{RequestsPerMin: MaxLimit, TokensPerMin: MaxLimit}).Validate(); err != nil {
		t.Fatal(err)
	}
	checkErrNames(t, DualBucket{RequestsPerMin: 0, TokensPerMin: 1}.Validate(), "DualBucket.RequestsPerMin", "= 0")
	checkErrNames(t, DualBucket{RequestsPerMin: 1, TokensPerMin: MaxLimit + 1}.Validate(), "DualBucket.TokensPerMin", "4294967296")
}

func TestFixedWindowValidate(t *testing.T) {
	if err := (FixedWindow{Limit: MaxLimit, Window: MaxWindow}).Validate(); err != nil {
		t.Fatal(err)
	}
	checkErrNames(t, FixedWindow{Limit: 0, Window: time.Second}.Validate(), "FixedWindow.Limit", "= 0")
	checkErrNames(t, FixedWindow{Limit: 1, Window: MaxWindow + time.Millisecond}.Validate(), "FixedWindow.Window", "1193h2m47.297s")
	checkErrNames(t, FixedWindow{Limit: 1, Window: 1500 * time.Microsecond}.Validate(), "FixedWindow.Window", "1.5ms")
}

func TestGCRAValidate(t *testing.T) {
	if err := (GCRA{Rate: MaxLimit, Burst: MaxLimit}).Validate(); err != nil {
		t.Fatal(err)
	}
	checkErrNames(t, GCRA{Rate: MaxLimit + 1, Burst: 1}.Validate(), "GCRA.Rate", "4294967296")
	checkErrNames(t, GCRA{Rate: 0, Burst: 1}.Validate(), "GCRA.Rate", "= 0")
	checkErrNames(t, GCRA{Rate: 1, Burst: 0}.Validate(), "GCRA.Burst", "= 0")
	checkErrNames(t, GCRA{Rate: 1, Burst: MaxLimit + 1}.Validate(), "GCRA.Burst", "4294967296")
}

func TestLeakyBucketValidate(t *testing.T) {
	if err := (LeakyBucket{Rate: MaxLimit, Capacity: MaxLimit}).Validate(); err != nil {
		t.Fatal(err)
	}
	checkErrNames(t, LeakyBucket{Rate: -1, Capacity: 1}.Validate(), "LeakyBucket.Rate", "-1")
	checkErrNames(t, LeakyBucket{Rate: 1, Capacity: MaxLimit + 1}.Validate(), "LeakyBucket.Capacity", "4294967296")
}

func checkErrNames(t *testing.T, err error, field string, value string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error naming %s = %s, got nil", field, value)
	}
	if !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), value) {
		t.Fatalf("error %q does not name %s and %s", err, field, value)
	}
}

func TestValidateNamesFieldAndValue(t *testing.T) {
	require.ErrorContains(t, SlidingCounter{Limit: 0, Window: time.Second}.Validate(), "SlidingCounter.Limit = 0")
	require.ErrorContains(t, SlidingCounter{Limit: 1, Window: time.Microsecond}.Validate(), "SlidingCounter.Window = 1µs is below 1ms")
	require.ErrorContains(t, SlidingCounter{Limit: 1, Window: 1001 * time.Microsecond}.Validate(), "not a whole number of milliseconds")
	require.ErrorContains(t, SlidingCounter{Limit: 1, Window: MaxWindow + time.Millisecond}.Validate(), "above the maximum")
	require.ErrorContains(t, SlidingCounter{Limit: 1, Window: math.MaxInt64}.Validate(), "above the maximum", "a window past the maximum is refused for that, not for its stray nanoseconds")
	require.NoError(t, SlidingCounter{Limit: MaxLimit, Window: time.Millisecond}.Validate())
}

func TestSlidingLogValidate(t *testing.T) {
	if err := (SlidingLog{Limit: MaxLogLimit, Window: MaxWindow}).Validate(); err != nil {
		t.Fatal(err)
	}
	checkErrNames(t, SlidingLog{Limit: MaxLogLimit + 1, Window: time.Second}.Validate(), "SlidingLog.Limit", "10001")
	checkErrNames(t, SlidingLog{Limit: 1, Window: 0}.Validate(), "SlidingLog.Window", "0s")
}

func TestTokenBucketValidate(t *testing.T) {
	if err := (TokenBucket{Rate: MaxLimit, Burst: MaxLimit}).Validate(); err != nil {
		t.Fatal(err)
	}
	checkErrNames(t, TokenBucket{Rate: 0, Burst: 1}.Validate(), "TokenBucket.Rate", "= 0")
	checkErrNames(t, TokenBucket{Rate: 1, Burst: MaxLimit + 1}.Validate(), "TokenBucket.Burst", "4294967296")
}
