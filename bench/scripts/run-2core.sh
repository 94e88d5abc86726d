#!/usr/bin/env bash
# Runs the comparison suite on a 2-core machine in under 8 minutes and writes, to
# bench/results/<UTC date>-2core/ (or the directory given as $1, relative to the current
# directory):
#
#   machine.txt              date, commit, go version, CPU model, cores, kernel
#   bench.txt                raw `go test -bench` output of BenchmarkLimiters (-cpu 1,2),
#                            three interleaved rounds of -count 2: six results per benchmark
#                            (fewer rounds if the machine is so busy that another would not
#                            finish within the 8 minutes; machine.txt then says so)
#   memory.txt               cmd/memory -keys 10000000 -limiter all -bench: bytes/key at 1M and 10M
#   benchstat-vs-floor.txt   benchstat, the floor as the base column
#   benchstat-vs-slidelimit.txt  benchstat, slidelimit as the base column
#   targets.md               the performance targets as ratios of the medians, met or missed
#   tables.md                the medians as markdown tables (ns/op, allocs/op, bytes/key)
#   *.png                    throughput against cores per workload, bytes per key
#
# Needs the network once (the Go module proxy) unless the module cache already holds the bench
# module's dependencies; benchstat is the bench module's tool (`go tool benchstat`, pinned in
# bench/go.mod), so nothing else is installed. Environment: ROUNDS (3), COUNT (2), BENCHTIME (0.2s),
# CPUS (1,2), MEMKEYS (10000000), BUDGET (480 seconds for the whole script), MEMFILE (the
# memory.txt of an earlier run to reuse instead of measuring again: the heap figures do not
# depend on how busy the machine is, the timings do).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/.." && pwd) # the bench module
rounds=${ROUNDS:-3}
count=${COUNT:-2}
benchtime=${BENCHTIME:-0.2s}
cpus=${CPUS:-1,2}
memkeys=${MEMKEYS:-10000000}
budget=${BUDGET:-480}
need_positive ROUNDS "$rounds"
need_positive COUNT "$count"
need_cpus CPUS "$cpus"
need_positive BUDGET "$budget"
memtime=120 # what the memory measurement takes here (about 90s), with a margin
if [ -n "${MEMFILE:-}" ]; then
	memtime=0
	# Now rather than after the rounds; and, like the directory given, from the caller's directory.
	if [ ! -r "$MEMFILE" ] || [ -d "$MEMFILE" ]; then
		echo "$me: MEMFILE \"$MEMFILE\": no such readable file" >&2
		exit 2
	fi
	memfile=$(cd "$(dirname "$MEMFILE")" && pwd)/$(basename "$MEMFILE")
else
	need_positive MEMKEYS "$memkeys"
fi
# BIN and the directory given are taken from the caller's directory: before the cd below.
[ -z "${BIN:-}" ] || BIN=$(cd "$BIN" && pwd)
most_args 1 "bench/scripts/run-2core.sh [OUTDIR]" "$@"
out=${1:-}
case $out in '' | /*) ;; *) out=$PWD/$out ;; esac
cd "$here"
out=${out:-results/$(date -u +%Y-%m-%d)-2core}
mkdir -p "$out"
start=$SECONDS

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	machine_lines
	echo "suite: $rounds rounds x -count $count, -benchtime $benchtime, -cpu $cpus; memory at 1M and $memkeys keys"
} >"$out/machine.txt"
cat "$out/machine.txt"

suite

# Rounds rather than one long -count, so that a noisy minute on a shared machine spreads over
# every limiter instead of landing on one.
: >"$out/bench.txt"
for r in $(seq "$rounds"); do
	began=$SECONDS
	echo "round $r/$rounds ($((SECONDS - start))s)"
	"$bin/peers.test" -test.run '^$' -test.bench '^BenchmarkLimiters$' -test.benchmem \
		-test.count "$count" -test.benchtime "$benchtime" -test.cpu "$cpus" | tee -a "$out/bench.txt" | grep -c '^Benchmark' | sed 's/^/  results: /'
	# Another round as long as this one, then the memory measurement, must fit the budget.
	if [ "$r" -lt "$rounds" ] && [ $((SECONDS - start + SECONDS - began + memtime)) -gt "$budget" ]; then
		echo "note: stopped after $r of $rounds rounds (round took $((SECONDS - began))s) to stay within ${budget}s" | tee -a "$out/machine.txt"
		break
	fi
done

echo "memory ($((SECONDS - start))s)"
if [ -n "${MEMFILE:-}" ]; then
	[ "$memfile" -ef "$out/memory.txt" ] || cp "$memfile" "$out/memory.txt"
	echo "memory: reused $MEMFILE" | tee -a "$out/machine.txt" # as given: machine.txt is kept with the results
else
	"$bin/memory" -keys "$memkeys" -limiter all -bench -parallel 2 | tee "$out/memory.txt"
fi

"$bin/benchstat" -col /limiter "$out/bench.txt" "$out/memory.txt" >"$out/benchstat-vs-floor.txt"
"$bin/benchstat" -col '/limiter@(slidelimit floor go-limiter httprate throttled ulule x-time-rate)' \
	"$out/bench.txt" "$out/memory.txt" >"$out/benchstat-vs-slidelimit.txt"
"$bin/charts" -o "$out" -table "$out/tables.md" -targets "$out/targets.md" "$out/bench.txt" "$out/memory.txt"
cat "$out/targets.md"
echo "done in $((SECONDS - start))s: ${1:-$out}" # the directory as given, if given
