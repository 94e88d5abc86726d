#!/usr/bin/env bash
# Builds, into the directory given as $1, the programs that run-16core.sh and run-batch-insert.sh
# run (peers.test, memory, charts, benchstat), as static binaries, with build.txt naming the commit
# and the Go version. Copy that directory to a machine that has no Go (or no network) and run
#
#   BIN=DIR bench/scripts/run-16core.sh
#
# there: the scripts then build nothing. GOOS and GOARCH (default: this machine's) choose the target.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/.." && pwd) # the bench module
most_args 1 "bench/scripts/build-bins.sh DIR" "$@"
dir=${1:?usage: build-bins.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
cd "$here"
export CGO_ENABLED=0 GOFLAGS=${GOFLAGS:--buildvcs=false}
build_suite "$dir"
{
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- .. 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "go: $(go version) (built $(date -u +%Y-%m-%dT%H:%M:%SZ), GOOS=$(go env GOOS) GOARCH=$(go env GOARCH))"
} >"$dir/build.txt"
cat "$dir/build.txt"
