#!/usr/bin/env bash
# PREFETCHW against PREFETCHT0 in AllowBatch, interleaved, at -cpu 4,16.
set -u
cd "$(dirname "$0")/../bench"
grep -m1 -o 3dnowprefetch /proc/cpuinfo || echo "no 3dnowprefetch"
for r in 1 2 3; do
	for v in base t0; do
		../.devbin2/$v.test -test.run '^$' -test.bench 'Batch/limiter=slidelimit(-batch)?/keys=1M-(zipf|uniform)/run=parallel' \
			-test.benchtime 0.2s -test.count 2 -test.cpu 4,16 -test.benchmem >> "$OUT/$v.txt"
	done
done
