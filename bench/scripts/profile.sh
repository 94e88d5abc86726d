#!/usr/bin/env bash
# Profiles slidelimit (and, for comparison, the floor) on each workload of BenchmarkLimiters,
# one goroutine, and prints where the time goes: the top functions of the benchmark loop only
# (pprof -focus on it, so that building the workload and warming the limiter are left out).
#
#   bench/scripts/profile.sh [OUTDIR]     (default: a temporary directory; profiles are kept there)
#
# Environment: LIMITERS (slidelimit floor), BENCHTIME (3s), TOP (15).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
out=${1:-$(mktemp -d)}
mkdir -p "$out"
benchtime=${BENCHTIME:-3s}
top=${TOP:-15}
go test -c -o "$out/peers.test" ./peers
for lim in ${LIMITERS:-slidelimit floor}; do
	for w in '1$' 1M-uniform 1M-zipf; do
		name=${w%\$}
		prof="$out/$lim-keys=$name.prof"
		"$out/peers.test" -test.run '^$' -test.bench "^BenchmarkLimiters$/^limiter=$lim$/^keys=$w/^run=serial$" \
			-test.benchtime "$benchtime" -test.cpuprofile "$prof" | grep '^Benchmark'
		go tool pprof -top -relative_percentages -nodecount "$top" -focus 'benchWorkload.func1$' "$out/peers.test" "$prof" 2>/dev/null |
			sed -n '/flat%/,$p'
		echo
	done
done
echo "profiles in $out"
