# Sourced by the scripts beside it (run from the bench module's directory): what they share.

# machine_lines prints the lines of machine.txt that say what ran where. With BIN, the commit and
# Go version are those of the binaries' build.txt: a copied tree's git need not match them.
machine_lines() {
	if [ -n "${BIN:-}" ]; then
		sed 's/^commit:/binaries built at commit:/' "$BIN/build.txt"
	else
		echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- .. 2>/dev/null || echo ' (with uncommitted changes)')"
		echo "go: $(go version)"
	fi
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "cores: $(nproc)"
	echo "kernel: $(uname -srm)"
}

# build_suite DIR builds the programs the scripts run (peers.test, memory, charts, benchstat)
# into DIR.
build_suite() {
	go test -c -o "$1/peers.test" ./peers
	go build -o "$1/memory" ./cmd/memory
	go build -o "$1/charts" ./cmd/charts
	go build -o "$1/benchstat" golang.org/x/perf/cmd/benchstat
}

# suite sets bin to the directory of the suite's programs: BIN when set (built elsewhere, as for a
# machine with no Go), else a temporary one built now and removed at exit.
suite() {
	if [ -n "${BIN:-}" ]; then
		bin=$BIN
		return
	fi
	bin=$(mktemp -d)
	trap 'rm -rf "$bin"' EXIT
	build_suite "$bin"
}
