package shard

import (
	"testing"

	"go.uber.org/goleak"
)

// The table starts no goroutine of its own; the concurrency tests' goroutines must all end too.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
