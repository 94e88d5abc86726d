#!/usr/bin/env bash
# Runs one bench/peers benchmark for several limiters, ROUNDS times, each limiter in a process of
# its own every round, and prints benchstat with the limiters side by side (-col /limiter; the
# first one named is the base column):
#
#   bench/scripts/rounds.sh BENCHMARK KEYS LIMITER...
#   e.g. bench/scripts/rounds.sh Batch 1M-uniform floor slidelimit slidelimit-batch
#
# Within one process, -count repeats a benchmark back to back, so a burst of load from elsewhere on
# a shared machine can land on every sample of one limiter and none of another. On the 2-core VM,
# the floor of BenchmarkBatch measured anywhere from 96 to 246 ns per key from one process to the
# next. Rounds of short processes, taking the limiters in turn, spread such bursts over all of them,
# and a process of its own keeps each limiter's heap from weighing on the next one's run.
#
# Environment: ROUNDS (10), BENCHTIME (0.3s), CPUS (1,2), OUT (where the raw results go; a
# temporary file if not given).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/.." && pwd) # the bench module
if [ $# -lt 3 ]; then
	echo "usage: bench/scripts/rounds.sh BENCHMARK KEYS LIMITER..." >&2
	exit 2
fi
bench=$1 keys=$2
shift 2
rounds=${ROUNDS:-10}
benchtime=${BENCHTIME:-0.3s}
cpus=${CPUS:-1,2}
need_positive ROUNDS "$rounds"
need_cpus CPUS "$cpus"
out=${OUT:-$(mktemp)}
touch "$out" && out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cd "$here"
go test -c -o "$bin/peers.test" ./peers
: >"$out"
for i in $(seq "$rounds"); do
	echo "round $i/$rounds" >&2
	for l in "$@"; do
		re="^Benchmark$bench\$/^limiter=$l\$/^keys=$keys\$"
		(cd peers && "$bin/peers.test" -test.run '^$' -test.bench "$re" \
			-test.benchtime "$benchtime" -test.cpu "$cpus" -test.benchmem) >"$bin/run.txt"
		# Each run, not just the file as a whole: one misspelt LIMITER among good ones would
		# otherwise leave only its column out.
		need_results "$bin/run.txt" "-test.bench '$re'" "check BENCHMARK, KEYS and LIMITER"
		cat "$bin/run.txt" >>"$out"
	done
done
go tool benchstat -col /limiter "$out"
# The raw results' path is printed relative to the bench module, or as the bare file name where it
# lies outside it (a temporary file), so that the output saved with the results names no machine.
case $out in
"$here"/*) shown=${out#"$here"/} ;;
*) shown=$(basename "$out") ;;
esac
echo "raw results: $shown" >&2
