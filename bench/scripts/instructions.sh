#!/usr/bin/env bash
# Counts the instructions of one Allow on a tracked key, with callgrind (valgrind), for the
# one-word and the two-word sliding-counter cell: engine's BenchmarkAllowSteady, whose state does
# not depend on the machine's speed, run at 500,000 and 1,500,000 decisions; the difference over
# 1,000,000 is the cost of one decision, the benchmark loop's few included. Then the same for one
# insert: BenchmarkInsertSteady (AllowKey on a new key, at the load of a presized table) at 4,000
# and 20,000 inserts.
#
#   bench/scripts/instructions.sh [REV]   (REV: count a commit instead of the working tree; the
#                                          benchmark's file is copied into a worktree of it)
#
# REV must be 5063ec5 (2026-12-03) or later: the copied engine/steady_bench_test.go uses
# WithExpectedKeys, which came in there, and at an older commit the build stops with "undefined:
# WithExpectedKeys" (checked at 0e48e88, the commit before, and at 5063ec5). Counts of older commits
# (bench/README.md's 1b0c89a, 160a8ac and 8f854a0) were made with the benchmark file of their day.
# Until 0c0ed64, WithExpectedKeys gave a shard no headroom over its share of the keys, so there
# BenchmarkInsertSteady's inserts may grow some shards' tables, and its count per insert with them.
#
# Needs valgrind. GODEBUG=asyncpreemptoff=1 keeps the runtime's preemption signals from upsetting
# callgrind; GOMAXPROCS=1 keeps the count to the benchmark's goroutine.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
most_args 1 "bench/scripts/instructions.sh [REV]" "$@"

repo=$(cd "$(dirname "$0")/../.." && pwd)
rev=${1:-}
# Before the temporary directory: git's "invalid reference" would not say which argument it means.
if [ -n "$rev" ] && ! git -C "$repo" rev-parse -q --verify "$rev^{commit}" >/dev/null; then
	echo "bench/scripts/instructions.sh: REV \"$rev\": not a commit of this repository" >&2
	exit 2
fi
tmp=$(mktemp -d)
dir=$repo
# The test binary and callgrind's files come to some 13 MB a run, and nothing reads them after.
cleanup() {
	[ ! -d "$tmp/tree" ] || git -C "$repo" worktree remove --force "$tmp/tree"
	rm -rf "$tmp"
}
trap cleanup EXIT
if [ -n "$rev" ]; then
	git -C "$repo" worktree add --detach -q "$tmp/tree" "$rev"
	cp "$repo/engine/steady_bench_test.go" "$tmp/tree/engine/"
	dir=$tmp/tree
fi
if ! (cd "$dir" && go test -c -o "$tmp/engine.test" ./engine); then
	[ -z "$rev" ] || echo "instructions.sh: the benchmark file does not build at $rev; REV must be 5063ec5 or later (see the usage above)" >&2
	exit 1
fi
count() { # count LOOP BENCH N: total instructions collected in LOOP, running BENCH N times
	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --toggle-collect="*$1" \
		--callgrind-out-file="$tmp/cg.$1.$3" "$tmp/engine.test" -test.run '^$' \
		-test.bench "$2" -test.benchtime "${3}x" >/dev/null 2>&1
	awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg.$1.$3"
}
for cell in word pair; do
	a=$(count steadyLoop "BenchmarkAllowSteady/cell=$cell\$" 500000)
	b=$(count steadyLoop "BenchmarkAllowSteady/cell=$cell\$" 1500000)
	echo "${rev:-working tree} cell=$cell: $(((b - a) / 1000000)) instructions per Allow"
done
a=$(count insertLoop 'BenchmarkInsertSteady$' 4000)
b=$(count insertLoop 'BenchmarkInsertSteady$' 20000)
echo "${rev:-working tree} insert: $(((b - a) / 16000)) instructions per new key"
