#!/usr/bin/env bash
# Runs the batch, insert and key-flood benchmarks of bench/peers and writes, to
# bench/results/<UTC date>-<cores>core-batch-insert/ (or the directory given as $1, relative to
# the current directory):
#
#   machine.txt   date, commit, go version, CPU model, cores, kernel
#   batch.txt     BenchmarkBatch: the floor's and slidelimit's Allow beside slidelimit's AllowBatch,
#                 per key, on 1M uniform and 1M Zipf keys
#   insert.txt    BenchmarkInsert: a new key into a limiter holding 10M (floor, slidelimit, httprate;
#                 1M inserts a run, a whole growth cycle of a growing limiter; slidelimit one key a
#                 call, run=serial, and 64 a call, run=batch; at most -count 4: see below)
#   fill.txt      BenchmarkFill: a limiter filled from empty to 10M keys, per key (floor, slidelimit,
#                 slidelimit-expected, httprate)
#   flood.txt     BenchmarkKeyFlood: every request a new key (slidelimit at a key cap of 2^20 with
#                 EvictStalest; the peers uncapped)
#   benchstat.txt `benchstat -col /limiter` of each file: the floor as the base column
#
# Takes about 9 minutes on 2 busy cores, most of it giving limiters their 10M keys. The insert and
# flood runs use fixed iteration counts: each op takes a new key from one cursor per limiter over
# 2^23 = 8,388,608 fresh keys, and each run takes N+1 (the testing package runs a benchmark once at
# b.N = 1 first, at every -count and -cpu value). Each is run at the largest -count, up to COUNT,
# whose keys fit: the insert's slidelimit runs run=serial and run=batch, 2 x (1,000,000+1) keys a
# count, so 4 counts of 1000000x fit and 6 do not; the flood runs run=serial and run=parallel at
# each -cpu value, 2 x cpus x (100,000+1) keys a count (6 counts fit with up to 6 -cpu values).
# machine.txt records the counts used. A run that still runs out fails, and so does this script.
# Environment: COUNT (6), BENCHTIME (0.2s, for the batch runs), CPUS (the -cpu list; default
# GOMAXPROCS; BenchmarkInsert, which is serial, runs at the default only), PARTS (the runs to
# make, of "batch insert fill flood"; all by default), BIN (a directory made by build-bins.sh:
# build nothing, as on a machine with no Go). Works offline like run-16core.sh when bench/vendor
# exists and GOFLAGS=-mod=vendor GOWORK=off are set.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/.." && pwd)
count=${COUNT:-6}
parts=${PARTS:-batch insert fill flood}
need_positive COUNT "$count"
need_parts "$parts"
[ -z "${CPUS:-}" ] || need_cpus CPUS "$CPUS"
parts=${parts//,/ }
# BIN and the directory given are taken from the caller's directory: before the cd below.
[ -z "${BIN:-}" ] || BIN=$(cd "$BIN" && pwd)
most_args 1 "bench/scripts/run-batch-insert.sh [OUTDIR]" "$@"
out=${1:-}
case $out in '' | /*) ;; *) out=$PWD/$out ;; esac
cd "$here"
cores=$(nproc)
out=${out:-results/$(date -u +%Y-%m-%d)-${cores}core-batch-insert}
mkdir -p "$out"
benchtime=${BENCHTIME:-0.2s}
cpuflag=()
[ -z "${CPUS:-}" ] || cpuflag=(-test.cpu "$CPUS")
# The fresh keys' count (bench/peers: fresh) and the insert's and flood's iterations a run.
freshkeys=$((1 << 23))
insertn=1000000
floodn=100000
# fit RUNS N: the largest -count, at most $count, at which RUNS runs of N+1 fresh keys each a count
# fit in the fresh keys.
fit() {
	local c=$((freshkeys / ($1 * ($2 + 1))))
	if [ "$c" -lt 1 ]; then
		echo "run-batch-insert.sh: $1 runs of $2 new keys do not fit in the $freshkeys fresh keys even once; use fewer -cpu values" >&2
		exit 1
	fi
	echo $((c < count ? c : count))
}
IFS=, read -r -a cpulist <<<"${CPUS:-default}"
insertcount=$(fit 2 "$insertn")                  # slidelimit's run=serial and run=batch
floodcount=$(fit $((2 * ${#cpulist[@]})) "$floodn") # run=serial and run=parallel at each -cpu value

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	machine_lines
	echo "suite: -count $count, batch -benchtime $benchtime, insert ${insertn}x -count $insertcount, fill 1x, flood ${floodn}x -count $floodcount, -cpu ${CPUS:-default}, parts: $parts"
} >"$out/machine.txt"
cat "$out/machine.txt"

suite

want() { [[ " $parts " == *" $1 "* ]]; }
run() { "$bin/peers.test" -test.run '^$' -test.benchmem -test.count "$count" "${cpuflag[@]}" "$@"; }
if want batch; then
	run -test.bench '^BenchmarkBatch$' -test.benchtime "$benchtime" | tee "$out/batch.txt"
	need_results "$out/batch.txt" "-test.bench '^BenchmarkBatch$'"
fi
if want insert; then
	# Serial only, so at one -cpu value: each value would give three limiters 10M keys again.
	"$bin/peers.test" -test.run '^$' -test.benchmem -test.count "$insertcount" -test.bench '^BenchmarkInsert$' \
		-test.benchtime "${insertn}x" -limiters floor,slidelimit,httprate | tee "$out/insert.txt"
	need_results "$out/insert.txt" "-test.bench '^BenchmarkInsert$'"
fi
if want fill; then
	# slidelimit-expected is left out of insert.txt: 8M inserts past its 10M would time its growth.
	"$bin/peers.test" -test.run '^$' -test.benchmem -test.count "$count" -test.bench '^BenchmarkFill$' \
		-test.benchtime 1x | tee "$out/fill.txt"
	need_results "$out/fill.txt" "-test.bench '^BenchmarkFill$'"
fi
if want flood; then
	"$bin/peers.test" -test.run '^$' -test.benchmem -test.count "$floodcount" "${cpuflag[@]}" \
		-test.bench '^BenchmarkKeyFlood$' -test.benchtime "${floodn}x" | tee "$out/flood.txt"
	need_results "$out/flood.txt" "-test.bench '^BenchmarkKeyFlood$'"
fi
for f in $parts; do
	echo "== $f"
	"$bin/benchstat" -col /limiter "$out/$f.txt"
done >"$out/benchstat.txt"
cat "$out/benchstat.txt"
