#!/usr/bin/env bash
# Runs the batch, insert and key-flood benchmarks of bench/peers and writes, to
# bench/results/<UTC date>-<cores>core-batch-insert/ (or the directory given as $1):
#
#   machine.txt   date, commit, go version, CPU model, cores, kernel
#   batch.txt     BenchmarkBatch: the floor's and slidelimit's Allow beside slidelimit's AllowBatch,
#                 per key, on 1M uniform and 1M Zipf keys
#   insert.txt    BenchmarkInsert: a new key into a limiter holding 10M (floor, slidelimit, httprate;
#                 1M inserts a run, a whole growth cycle of a growing limiter)
#   fill.txt      BenchmarkFill: a limiter filled from empty to 10M keys, per key (floor, slidelimit,
#                 slidelimit-expected, httprate)
#   flood.txt     BenchmarkKeyFlood: every request a new key (slidelimit at a key cap of 2^20 with
#                 EvictStalest; the peers uncapped)
#   benchstat.txt `benchstat -col /limiter` of each file: the floor as the base column
#
# Takes about 9 minutes on 2 busy cores, most of it giving limiters their 10M keys. The insert and
# flood runs use fixed iteration counts (each op consumes a fresh key, and there are 8M of them).
# Environment: COUNT (6), BENCHTIME (0.2s, for the batch runs), CPUS (the -cpu list; default
# GOMAXPROCS; BenchmarkInsert, which is serial, runs at the default only), PARTS (the runs to
# make, of "batch insert fill flood"; all by default), BIN (a directory made by build-bins.sh:
# build nothing, as on a machine with no Go). Works offline like run-16core.sh when bench/vendor
# exists and GOFLAGS=-mod=vendor GOWORK=off are set.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/.." && pwd)
[ -z "${BIN:-}" ] || BIN=$(cd "$BIN" && pwd) # before the cd below, so that a relative BIN works
cd "$here"
cores=$(nproc)
out=${1:-results/$(date -u +%Y-%m-%d)-${cores}core-batch-insert}
mkdir -p "$out"
count=${COUNT:-6}
parts=${PARTS:-batch insert fill flood}
parts=${parts//,/ }
benchtime=${BENCHTIME:-0.2s}
cpuflag=()
[ -z "${CPUS:-}" ] || cpuflag=(-test.cpu "$CPUS")

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	machine_lines
	echo "suite: -count $count, batch -benchtime $benchtime, insert 1000000x, fill 1x, flood 100000x, -cpu ${CPUS:-default}, parts: $parts"
} >"$out/machine.txt"
cat "$out/machine.txt"

suite

want() { [[ " $parts " == *" $1 "* ]]; }
run() { "$bin/peers.test" -test.run '^$' -test.benchmem -test.count "$count" "${cpuflag[@]}" "$@"; }
if want batch; then
	run -test.bench '^BenchmarkBatch$' -test.benchtime "$benchtime" | tee "$out/batch.txt"
fi
if want insert; then
	# Serial only, so at one -cpu value: each value would give three limiters 10M keys again.
	"$bin/peers.test" -test.run '^$' -test.benchmem -test.count "$count" -test.bench '^BenchmarkInsert$' \
		-test.benchtime 1000000x -limiters floor,slidelimit,httprate | tee "$out/insert.txt"
fi
if want fill; then
	# slidelimit-expected is left out of insert.txt: 6M inserts past its 10M would time its growth.
	"$bin/peers.test" -test.run '^$' -test.benchmem -test.count "$count" -test.bench '^BenchmarkFill$' \
		-test.benchtime 1x | tee "$out/fill.txt"
fi
if want flood; then
	run -test.bench '^BenchmarkKeyFlood$' -test.benchtime 100000x | tee "$out/flood.txt"
fi
for f in $parts; do
	echo "== $f"
	"$bin/benchstat" -col /limiter "$out/$f.txt"
done >"$out/benchstat.txt"
cat "$out/benchstat.txt"
