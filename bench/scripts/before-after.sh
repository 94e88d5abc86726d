#!/usr/bin/env bash
# Compares slidelimit's BenchmarkLimiters results at two commits in one run: builds the bench
# test binary at each (git worktrees in a temporary directory), alternates them ROUNDS times so
# that both see the same machine load, and prints benchstat with BEFORE as the base column.
#
#   bench/scripts/before-after.sh BEFORE [AFTER]     (AFTER: the working tree when not given)
#
# Environment: ROUNDS (5), BENCH (the regexp, default every slidelimit workload), BENCHTIME (0.2s),
# CPUS (1,2), PKG (the package whose benchmarks run, as a path from the repository root; default
# bench/peers, e.g. PKG=shard BENCH=Reclaim). With TESTS_FROM_TREE=1 both builds use the working
# tree's $PKG/*_test.go, so that a benchmark added since BEFORE runs on it too. The raw outputs
# are kept next to the worktrees; the script prints where.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd) # the bench module
before=${1:?usage: bench/scripts/before-after.sh BEFORE [AFTER]}
after=${2:-}
rounds=${ROUNDS:-5}
bench=${BENCH:-Limiters/limiter=slidelimit/}
benchtime=${BENCHTIME:-0.2s}
cpus=${CPUS:-1,2}
pkg=${PKG:-bench/peers}
tmp=$(mktemp -d)
repo=$(git -C "$here" rev-parse --show-toplevel)

build() { # build NAME REV: a test binary of $pkg at REV (the working tree if empty)
	local root="$repo"
	if [ -n "$2" ]; then
		git -C "$repo" worktree add --detach -q "$tmp/$1-tree" "$2"
		root="$tmp/$1-tree"
		if [ "${TESTS_FROM_TREE:-}" = 1 ]; then
			cp "$repo/$pkg"/*_test.go "$root/$pkg/"
		fi
	fi
	(cd "$root/$pkg" && go test -c -o "$tmp/$1.test" .)
}
cleanup() {
	for n in before after; do
		[ ! -d "$tmp/$n-tree" ] || git -C "$repo" worktree remove --force "$tmp/$n-tree"
	done
}
trap cleanup EXIT

build before "$before"
build after "$after"
for i in $(seq "$rounds"); do
	echo "round $i/$rounds" >&2
	for n in before after; do
		"$tmp/$n.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" -test.cpu "$cpus" >>"$tmp/$n.txt"
	done
done
cd "$here"
go tool benchstat "before=$tmp/before.txt" "after=$tmp/after.txt"
echo "raw results: $tmp/before.txt $tmp/after.txt" >&2
