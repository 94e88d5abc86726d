#!/usr/bin/env bash
# Runs the comparison suite on a 16-core machine in under 6 minutes, without the network, and
# writes to bench/results/<UTC date>-16core/ (or the directory given as $1, relative to the
# current directory) the same files as run-2core.sh: machine.txt, bench.txt (BenchmarkLimiters at
# -cpu 1,2,4,8,16), memory.txt, benchstat-vs-floor.txt, benchstat-vs-slidelimit.txt, targets.md
# (including the 1->16-core scaling target) and the PNG charts.
#
# It builds from vendored modules, so the machine needs Go and nothing else. bench/vendor/ is
# not committed (it is in .gitignore); make it first, on any machine with the module proxy:
#
#   cd bench && GOWORK=off go mod vendor
#
# then copy the working tree, vendor/ included, to the 16-core machine and run
#
#   bench/scripts/run-16core.sh
#
# benchstat is built from the vendored golang.org/x/perf as well (a tool of the bench module).
# The go.work at the repository root is switched off (GOWORK=off): with it, Go would ignore
# vendor/. On a machine with no Go at all, set BIN to a directory made by scripts/build-bins.sh
# elsewhere: then nothing is built and neither Go nor vendor/ is needed.
# Environment: ROUNDS (1), COUNT (3), BENCHTIME (0.1s), CPUS (1,2,4,8,16),
# MEMKEYS (10000000; 0 skips the memory run, whose bytes per key do not depend on the cores),
# BATCH (1: also run scripts/run-batch-insert.sh into <out>/batch-insert/ with
# the same -cpu list, about 10 more minutes; 0 to skip; its PARTS, BATCH_COUNT and BATCH_BENCHTIME
# (0.2s) pass through as its PARTS, COUNT and BENCHTIME), BIN. On a 16-core Intel Xeon VM,
# ROUNDS=3 COUNT=1 took 4 minutes (bench/results/2026-12-04-16core/).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/.." && pwd) # the bench module
rounds=${ROUNDS:-1}
count=${COUNT:-3}
benchtime=${BENCHTIME:-0.1s}
cpus=${CPUS:-1,2,4,8,16}
memkeys=${MEMKEYS:-10000000}
need_positive ROUNDS "$rounds"
need_positive COUNT "$count"
need_cpus CPUS "$cpus"
need_whole MEMKEYS "$memkeys"
if [ "${BATCH:-1}" != 0 ]; then
	# run-batch-insert.sh checks these too, but only after this script's own runs.
	need_positive BATCH_COUNT "${BATCH_COUNT:-6}"
	[ -z "${PARTS:-}" ] || need_parts "$PARTS"
fi
# BIN and the directory given are taken from the caller's directory: before the cd below.
if [ -n "${BIN:-}" ]; then
	BIN=$(cd "$BIN" && pwd)
	export BIN
fi
most_args 1 "bench/scripts/run-16core.sh [OUTDIR]" "$@"
out=${1:-}
case $out in '' | /*) ;; *) out=$PWD/$out ;; esac
cd "$here"
if [ -z "${BIN:-}" ] && [ ! -f vendor/modules.txt ]; then
	echo "run-16core.sh: bench/vendor is missing; run 'cd bench && GOWORK=off go mod vendor' first (needs the network once)" >&2
	exit 1
fi
export GOWORK=off GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local
out=${out:-results/$(date -u +%Y-%m-%d)-16core}
mkdir -p "$out"
start=$SECONDS
if [ "$(nproc)" -lt 16 ]; then
	echo "warning: this machine has $(nproc) cores; GOMAXPROCS above that measures oversubscription" >&2
fi

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	machine_lines
	echo "suite: $rounds rounds x -count $count, -benchtime $benchtime, -cpu $cpus; $([ "$memkeys" = 0 ] && echo "no memory run (MEMKEYS=0)" || echo "memory at 1M and $memkeys keys")"
} >"$out/machine.txt"
cat "$out/machine.txt"

suite

: >"$out/bench.txt"
for r in $(seq "$rounds"); do
	echo "round $r/$rounds ($((SECONDS - start))s)"
	"$bin/peers.test" -test.run '^$' -test.bench '^BenchmarkLimiters$' -test.benchmem \
		-test.count "$count" -test.benchtime "$benchtime" -test.cpu "$cpus" | tee -a "$out/bench.txt" | grep -c '^Benchmark' | sed 's/^/  results: /'
done

files=("$out/bench.txt")
if [ "$memkeys" != 0 ]; then
	echo "memory ($((SECONDS - start))s)"
	"$bin/memory" -keys "$memkeys" -limiter all -bench -parallel 4 | tee "$out/memory.txt"
	files+=("$out/memory.txt")
fi

"$bin/benchstat" -col /limiter "${files[@]}" >"$out/benchstat-vs-floor.txt"
"$bin/benchstat" -col '/limiter@(slidelimit floor go-limiter httprate throttled ulule x-time-rate)' \
	"${files[@]}" >"$out/benchstat-vs-slidelimit.txt"
"$bin/charts" -o "$out" -table "$out/tables.md" -targets "$out/targets.md" "${files[@]}"
cat "$out/targets.md"
if [ "${BATCH:-1}" != 0 ]; then
	echo "batch, insert, key flood ($((SECONDS - start))s)"
	# BENCHTIME is this script's own: the batch runs keep theirs unless BATCH_BENCHTIME is given.
	CPUS=$cpus COUNT=${BATCH_COUNT:-6} BENCHTIME=${BATCH_BENCHTIME:-0.2s} bash "$here/scripts/run-batch-insert.sh" "$out/batch-insert"
fi
echo "done in $((SECONDS - start))s: ${1:-$out}" # the directory as given, if given
