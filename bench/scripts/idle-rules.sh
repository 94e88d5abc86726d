#!/usr/bin/env bash
# Measures what an idle `slidelimit proxy` with many rules costs: it writes a -config file of RULES
# rules (4,000 by default), each with two limits (8,000 limiters), starts the proxy on it, waits
# until it listens, and prints how long that took and the CPU time it used over SECONDS_IDLE seconds
# (10 by default) with no request at all.
#
#   bench/scripts/idle-rules.sh [SLIDELIMIT_BINARY]
#
# Without a binary it builds cmd/slidelimit from this checkout. Linux only (it reads /proc).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/../.." && pwd) # the repository
rules=${RULES:-4000}
seconds=${SECONDS_IDLE:-10}
need_positive RULES "$rules"
need_positive SECONDS_IDLE "$seconds"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
most_args 1 "bench/scripts/idle-rules.sh [SLIDELIMIT_BINARY]" "$@"
bin=${1:-}
if [ -z "$bin" ]; then
	(cd "$here/cmd/slidelimit" && go build -o "$tmp/slidelimit" .)
	bin=$tmp/slidelimit
fi
{
	echo "rules:"
	for i in $(seq 0 $((rules - 1))); do
		printf '  - name: r%d\n    paths: [/p%d/]\n    rates: [10/1s, 1000/1h]\n' "$i" "$i"
	done
} >"$tmp/rules.yaml"
start=$(date +%s.%N)
"$bin" proxy -listen 127.0.0.1:0 -upstream http://127.0.0.1:1 -config "$tmp/rules.yaml" 2>"$tmp/log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
until grep -q 'listening on' "$tmp/log"; do
	kill -0 $pid 2>/dev/null || { cat "$tmp/log" >&2; exit 1; }
	sleep 0.05
done
up=$(date +%s.%N)
hz=$(getconf CLK_TCK)
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
sleep "$seconds"
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
kill $pid
wait $pid 2>/dev/null || true
awk -v r="$rules" -v s="$seconds" -v a="$start" -v b="$up" -v c="$((t1 - t0))" -v hz="$hz" 'BEGIN {
	printf "%d rules (%d limiters): listening after %.2f s; idle CPU %.2f s over %d s (%.3f cores)\n", r, 2*r, b-a, c/hz, s, c/hz/s
}'
