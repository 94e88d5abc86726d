package testvectors_test

import (
	"fmt"
	"os"

	"github.com/slidelimit/slidelimit/testvectors"
)

// A vector file pins a policy's behaviour call by call; RunReference replays it on the reference
// model (Run does the same on the engine) and prints one line per failing step. The last
// expectation here is deliberately wrong: one ms into the next window the estimate is
// floor(5*999/1000) = 4 carried plus the 1 just admitted.
func Example() {
	f, err := testvectors.Parse("example.json", []byte(`{
	  "policy": "rate-limiter/sliding-counter", "version": 1,
	  "cases": [{"name": "floor", "params": {"limit": 5, "windowMs": 1000}, "seed": 1, "steps": [
	    {"call": "allow", "args": [1, 5, 0], "expect": true},
	    {"call": "allow", "args": [1, 1, 1000], "expect": false},
	    {"call": "allow", "args": [1, 1, 1001], "expect": true},
	    {"call": "estimateOf", "args": [1, 1001], "expect": 4}
	  ]}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	passed, failed, err := testvectors.RunReference(f, os.Stdout)
	fmt.Println(passed, "passed,", failed, "failed,", err)
	// Output:
	// example.json: case "floor" step 3: estimateOf(1, 1001): expected 4, got 5
	// 3 passed, 1 failed, <nil>
}
