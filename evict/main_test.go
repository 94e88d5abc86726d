package evict

import (
	"testing"

	"go.uber.org/goleak"
)

// Start runs a goroutine until its stop function returns: none may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
