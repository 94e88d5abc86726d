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
# are kept in a temporary directory, and the script prints where; the worktrees and test binaries
# there are removed at exit, and the directory too when the run failed before any result.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/.." && pwd) # the bench module
most_args 2 "bench/scripts/before-after.sh BEFORE [AFTER]" "$@"
before=${1:?usage: bench/scripts/before-after.sh BEFORE [AFTER]}
after=${2:-}
rounds=${ROUNDS:-5}
bench=${BENCH:-Limiters/limiter=slidelimit/}
benchtime=${BENCHTIME:-0.2s}
cpus=${CPUS:-1,2}
pkg=${PKG:-bench/peers}
need_positive ROUNDS "$rounds"
need_cpus CPUS "$cpus"
repo=$(git -C "$here" rev-parse --show-toplevel)
# Before any worktree or temporary directory: git's own "invalid reference" would not say which
# of the two was wrong.
for arg in "BEFORE $before" "AFTER $after"; do
	rev=${arg#* }
	if [ -n "$rev" ] && ! git -C "$repo" rev-parse -q --verify "$rev^{commit}" >/dev/null; then
		echo "$me: ${arg%% *} \"$rev\": not a commit of this repository" >&2
		exit 2
	fi
done
tmp=$(mktemp -d)

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
	local rc=$?
	for n in before after; do
		[ ! -d "$tmp/$n-tree" ] || git -C "$repo" worktree remove --force "$tmp/$n-tree"
	done
	rm -f "$tmp/before.test" "$tmp/after.test" "$tmp/run.txt"
	if [ ! -s "$tmp/before.txt" ]; then
		rm -rf "$tmp" # nothing measured: nothing to keep
	elif [ "$rc" != 0 ]; then
		echo "raw results so far: $tmp/before.txt $tmp/after.txt" >&2
	fi
}
trap cleanup EXIT

build before "$before"
build after "$after"
for i in $(seq "$rounds"); do
	echo "round $i/$rounds" >&2
	for n in before after; do
		"$tmp/$n.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" -test.cpu "$cpus" >"$tmp/run.txt"
		# BENCH may match at one commit and not the other (a benchmark added since BEFORE).
		rev=$before hint="check BENCH and PKG"
		if [ "$n" = after ]; then
			rev=${after:-the working tree}
		elif [ "${TESTS_FROM_TREE:-}" != 1 ]; then
			hint="$hint; TESTS_FROM_TREE=1 runs a benchmark added since BEFORE"
		fi
		need_results "$tmp/run.txt" "BENCH '$bench' in $pkg at $n ($rev)" "$hint"
		cat "$tmp/run.txt" >>"$tmp/$n.txt"
	done
done
cd "$here"
go tool benchstat "before=$tmp/before.txt" "after=$tmp/after.txt"
echo "raw results: $tmp/before.txt $tmp/after.txt" >&2
