//go:build race

package engine

// raceOn is true under the race detector, which slows the stress tests tenfold or more.
const raceOn = true
