#!/usr/bin/env bash
# Profiles slidelimit (and, for comparison, the floor) on each workload of BenchmarkLimiters,
# one goroutine, and prints where the time goes: the top functions of the benchmark loop only
# (pprof -focus on it, so that building the workload and warming the limiter are left out).
#
#   bench/scripts/profile.sh [OUTDIR]     (default: a temporary directory; profiles are kept there.
#                                          A relative OUTDIR is taken from the current directory)
#
# Environment: LIMITERS (slidelimit floor), BENCHTIME (3s), TOP (15).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/.." && pwd)
benchtime=${BENCHTIME:-3s}
top=${TOP:-15}
need_positive TOP "$top"
most_args 1 "bench/scripts/profile.sh [OUTDIR]" "$@"
out=${1:-}
case $out in '' | /*) ;; *) out=$PWD/$out ;; esac # before the cd below
cd "$here"
out=${out:-$(mktemp -d)}
mkdir -p "$out"
go test -c -o "$out/peers.test" ./peers
for lim in ${LIMITERS:-slidelimit floor}; do
	for w in '1$' 1M-uniform 1M-zipf; do
		name=${w%\$}
		prof="$out/$lim-keys=$name.prof"
		re="^BenchmarkLimiters$/^limiter=$lim$/^keys=$w/^run=serial$"
		res=$("$out/peers.test" -test.run '^$' -test.bench "$re" -test.benchtime "$benchtime" -test.cpuprofile "$prof")
		if ! grep '^Benchmark' <<<"$res"; then
			echo "$me: no benchmark result: -test.bench '$re' matched nothing (check LIMITERS)" >&2
			exit 1
		fi
		go tool pprof -top -relative_percentages -nodecount "$top" -focus 'benchWorkload.func1$' "$out/peers.test" "$prof" 2>/dev/null |
			sed -n '/flat%/,$p'
		echo
	done
done
echo "profiles in ${1:-$out}" # the directory as given, if given
