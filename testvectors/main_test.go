package testvectors_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every limiter Run creates is closed before Run returns: nothing may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
