package redistest_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// TestMain skips the package, its example included, where the server program is not installed,
// as every Redis test does; under CI=true it runs them, and they fail.
func TestMain(m *testing.M) {
	if _, err := exec.LookPath(redistest.Program()); err != nil && os.Getenv("CI") != "true" {
		fmt.Printf("skipping: %s is not installed (%v)\n", redistest.Program(), err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}
