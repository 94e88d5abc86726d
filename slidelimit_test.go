package slidelimit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
)

func TestReasonErr(t *testing.T) {
	cases := map[slidelimit.Reason]error{
		slidelimit.ReasonOK:             nil,
		slidelimit.ReasonLimited:        nil,
		slidelimit.ReasonCostAboveLimit: slidelimit.ErrCostAboveLimit,
		slidelimit.ReasonNegativeCost:   slidelimit.ErrNegativeCost,
		slidelimit.ReasonKeyCap:         slidelimit.ErrKeyCap,
		slidelimit.ReasonClosed:         slidelimit.ErrClosed,
		slidelimit.ReasonInvalidLimit:   slidelimit.ErrInvalidLimit,
	}
	for r, want := range cases {
		if got := r.Err(); !errors.Is(got, want) || (want == nil) != (got == nil) {
			t.Errorf("%v.Err() = %v, want %v", r, got, want)
		}
	}
	if got := slidelimit.Reason(200).String(); got != "unknown" {
		t.Errorf("Reason(200).String() = %q", got)
	}
}

// Only the reasons a policy decided judge the quota; an unknown value claims nothing.
func TestReasonQuotaKnown(t *testing.T) {
	want := map[slidelimit.Reason]bool{
		slidelimit.ReasonOK:             true,
		slidelimit.ReasonLimited:        true,
		slidelimit.ReasonCostAboveLimit: true,
		slidelimit.ReasonNegativeCost:   false,
		slidelimit.ReasonKeyCap:         false,
		slidelimit.ReasonClosed:         false,
		slidelimit.ReasonInvalidLimit:   false,
		slidelimit.Reason(200):          false,
	}
	for r, w := range want {
		if got := r.QuotaKnown(); got != w {
			t.Errorf("%v.QuotaKnown() = %v, want %v", r, got, w)
		}
	}
}

// A Decision judged the quota when its reason may have, except a cost above the limit refused
// before the key's state was read, which has no ResetAt.
func TestDecisionQuotaKnown(t *testing.T) {
	reset := time.UnixMilli(1_800_000_000_000)
	for _, c := range []struct {
		d    slidelimit.Decision
		want bool
	}{
		{slidelimit.Decision{Allowed: true, Remaining: 4, ResetAt: reset}, true},
		{slidelimit.Decision{Reason: slidelimit.ReasonLimited, ResetAt: reset}, true},
		{slidelimit.Decision{Reason: slidelimit.ReasonCostAboveLimit, Remaining: 5, ResetAt: reset}, true},
		{slidelimit.Decision{Reason: slidelimit.ReasonCostAboveLimit, Limit: 5}, false},
		{slidelimit.Decision{Reason: slidelimit.ReasonKeyCap, Limit: 5, ResetAt: reset}, false},
		{slidelimit.Decision{Reason: slidelimit.ReasonClosed}, false},
	} {
		if got := c.d.QuotaKnown(); got != c.want {
			t.Errorf("%+v.QuotaKnown() = %v, want %v", c.d, got, c.want)
		}
	}
}

func TestFailureModeRoundTrip(t *testing.T) {
	for _, m := range []slidelimit.FailureMode{slidelimit.FailOpen, slidelimit.FailClosed, slidelimit.FailLocal} {
		got, err := slidelimit.ParseFailureMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseFailureMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := slidelimit.ParseFailureMode(""); err == nil {
		t.Error(`ParseFailureMode("") gave no error`)
	}
	if got := slidelimit.FailureMode(9).String(); got != "FailureMode(9)" {
		t.Errorf("FailureMode(9).String() = %q", got)
	}
}
