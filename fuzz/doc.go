// Package fuzz holds slidelimit's differential fuzz targets and nothing else: every file but this
// one is a test file. Each target decodes a sequence of operations from the fuzz input and runs it
// through the real engine (engine.New with a manual clock, integer keys) and through the plain
// reference model (internal/reference), and fails on the first decision, retry-after, probe or
// key count on which they disagree, printing the input decoded into operations.
//
// Serial targets, one per policy (FuzzSlidingCounter, FuzzSlidingLog, FuzzFixedWindow,
// FuzzTokenBucket, FuzzGCRA, FuzzLeakyBucket, FuzzDualBucket), compare every call; concurrent
// targets (FuzzConcurrentSlidingCounter, …) issue the decoded requests from 2 to 8 goroutines under
// a frozen clock and check that the outcome is one that some serial order of the same requests
// produces in the model. The seed corpora under testdata/fuzz run on every `go test ./fuzz/`;
// scripts/fuzz fuzzes each target in turn. The package has no API, so there is nothing here to
// use concurrently.
package fuzz
