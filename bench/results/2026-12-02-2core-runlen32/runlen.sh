#!/usr/bin/env bash
# Produced runlen16.txt, runlen32.txt and runlen64.txt: the bench/peers test binary built three
# times from one commit (8f7b34c, where RunLen was 16), with `const RunLen = N` in shard/run.go,
# then run in turn, ROUNDS times, so that the three see the same machine load. Compare with
#   go tool benchstat -filter .unit:sec/op r16=runlen16.txt r32=runlen32.txt r64=runlen64.txt
#
#   bash runlen.sh [BASE]     (run from anywhere inside the repository)
set -euo pipefail
base=${1:-8f7b34c}
rounds=${ROUNDS:-6}
repo=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
for n in 16 32 64; do
	git -C "$repo" worktree add -q --detach "$tmp/t$n" "$base"
	sed -i "s/^const RunLen = .*/const RunLen = $n/" "$tmp/t$n/shard/run.go"
	(cd "$tmp/t$n/bench" && go test -c -o "$tmp/b$n.test" ./peers)
done
cd "$repo/bench/peers"
for i in $(seq "$rounds"); do
	for n in 16 32 64; do
		"$tmp/b$n.test" -test.run '^$' -test.bench 'Batch/limiter=(floor|slidelimit-batch)/keys=1M-(uniform|zipf)/' \
			-test.benchtime 0.3s -test.cpu 1,2 >>"$tmp/runlen$n.txt"
	done
done
for n in 16 32 64; do git -C "$repo" worktree remove --force "$tmp/t$n"; done
echo "results: $tmp/runlen16.txt $tmp/runlen32.txt $tmp/runlen64.txt"
