package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The built-in benchmark prints one figure per metric for slidelimit and for the reference, says
// what keys tracked means, and ends with a one-line summary whose ratio is the two decisions/s
// figures it printed.
func TestBenchOutput(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"bench", "-keys", "20000", "-duration", "50ms", "-workers", "2"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	out := stdout.String()

	assert.Contains(t, out, "slidelimit bench: sliding-counter, limit 10 per 1s, 20,000 keys (uniform), 2 goroutines")
	assert.Contains(t, out, "Keys tracked are the keys with live state at the end of the run")
	assert.Contains(t, out, "reference, measured just now on the same keys and goroutines")

	perSec := regexp.MustCompile(`(?m)^  decisions/s +([0-9,]+)  all goroutines together$`).FindAllStringSubmatch(out, -1)
	require.Len(t, perSec, 2, out)
	tracked := regexp.MustCompile(`(?m)^  keys tracked +([0-9,]+)$`).FindAllStringSubmatch(out, -1)
	require.Len(t, tracked, 2, out)
	// The reference never forgets a key, and every key was offered in its warm-up.
	assert.Equal(t, "20,000", tracked[1][1])
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  ns per decision") {
			assert.NotContains(t, line, "(", "one figure per metric: %q", line)
		}
	}

	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	m := regexp.MustCompile(`^summary: slidelimit made ([0-9.]+)× the decisions per second of a mutex-guarded map of counters measured just now, at ([0-9.]+)× its bytes per key$`).FindStringSubmatch(last)
	require.NotNil(t, m, "last line: %q", last)
	num := func(s string) float64 {
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
		require.NoError(t, err)
		return f
	}
	want := num(perSec[0][1]) / num(perSec[1][1])
	// The summary rounds to one decimal, and the printed figures are truncated to whole decisions.
	assert.InDelta(t, want, num(m[1]), 0.06+want*0.001, "summary %s× against %s / %s", m[1], perSec[0][1], perSec[1][1])
}

// -reference=false measures slidelimit alone.
func TestBenchWithoutReference(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"bench", "-keys", "500", "-duration", "20ms", "-reference=false"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	assert.NotContains(t, stdout.String(), "reference")
	assert.NotContains(t, stdout.String(), "summary:")
}

// Many workers still measure for about -duration: they start together and each stops at the
// deadline, where a worker already running kept the rest from starting, and the run from
// stopping, for minutes at 16,384 workers. The bound is far above the run, a hang's not a speed's.
func TestBenchManyWorkersStopsOnTime(t *testing.T) {
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"bench", "-keys", "1000", "-duration", "50ms", "-workers", "16384", "-reference=false"}, &stdout, &stderr)
	}()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("slidelimit bench -duration 50ms -workers 16384 ran past 60s")
	}
	assert.Contains(t, stdout.String(), "16384 goroutines")
}

// The reference decides by the same sliding-counter rules as the engine: limit per window, the
// previous window's count carried with the floor, nothing for a refused request.
func TestMutexMapLimiterRules(t *testing.T) {
	l := newMutexMapLimiter(3, 1<<40, 1) // a window far longer than the test: nothing rolls
	got := []bool{l.allow(7), l.allow(7), l.allow(7), l.allow(7), l.allow(8)}
	assert.Equal(t, []bool{true, true, true, false, true}, got)
	assert.Equal(t, 2, l.len())
}
