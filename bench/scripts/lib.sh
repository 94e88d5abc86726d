# Sourced by the scripts beside it: what they share. machine_lines and build_suite run from the
# bench module's directory; the checks below from anywhere.

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

# The checks below refuse a bad setting before anything is built or measured, and name it. Left
# alone, seq takes ROUNDS=abc or 0 as no rounds (a failed $(...) in a for list does not trip
# set -e), a test binary whose -test.bench matches nothing prints PASS and exits 0, and benchstat
# exits 0 on a missing file: the script would measure nothing and exit 0.
me="bench/scripts/${0##*/}"

# most_args MAX USAGE ARGS...: exits 2 when more than MAX arguments were given. Without it a
# second directory or commit given by mistake would be dropped unseen, and the run would measure
# something else than was asked.
most_args() {
	local max=$1 usage=$2
	shift 2
	if [ $# -gt "$max" ]; then
		echo "$me: too many arguments (got $#: $*); usage: $usage" >&2
		exit 2
	fi
}

# need_positive NAME VALUE: VALUE, the setting NAME, must be a whole number from 1 (digits only,
# no leading zero: bash arithmetic reads 010 as octal 8); exits 2 otherwise.
need_positive() {
	case $2 in
	'' | *[!0-9]* | 0*)
		echo "$me: $1 \"$2\": must be a positive whole number" >&2
		exit 2
		;;
	esac
	# Past 9 digits, nothing here means it, and bash's arithmetic would wrap before long.
	if [ ${#2} -gt 9 ]; then
		echo "$me: $1 \"$2\": too large" >&2
		exit 2
	fi
}

# need_whole NAME VALUE: as need_positive, but 0 is allowed too (MEMKEYS=0: no memory run).
need_whole() {
	case $2 in
	0) ;;
	'' | *[!0-9]* | 0*)
		echo "$me: $1 \"$2\": must be a whole number (0 or more)" >&2
		exit 2
		;;
	*) need_positive "$1" "$2" ;;
	esac
}

# need_cpus NAME VALUE: VALUE must be a -test.cpu list, positive whole numbers joined by commas.
need_cpus() {
	local v ok=1 list
	case $2 in '' | ,* | *, | *,,*) ok= ;; esac
	IFS=, read -r -a list <<<"$2"
	for v in "${list[@]}"; do
		case $v in '' | *[!0-9]* | 0*) ok= ;; esac
	done
	if [ -z "$ok" ]; then
		echo "$me: $1 \"$2\": must be positive whole numbers joined by commas, such as 1,2,4" >&2
		exit 2
	fi
}

# need_parts VALUE: VALUE must name one or more of run-batch-insert.sh's runs, separated by
# spaces or commas; a misspelt one would otherwise be skipped without a word.
need_parts() {
	local p n=0 list
	IFS=$', \t' read -r -a list <<<"$1"
	for p in "${list[@]}"; do
		case $p in
		'') ;;
		batch | insert | fill | flood) n=$((n + 1)) ;;
		*)
			echo "$me: PARTS \"$1\": \"$p\" is none of batch insert fill flood" >&2
			exit 2
			;;
		esac
	done
	if [ "$n" = 0 ]; then
		echo "$me: PARTS \"$1\": names no run (batch insert fill flood)" >&2
		exit 2
	fi
}

# need_results FILE WHAT [HINT]: FILE, the output of one benchmark run, must hold a result; WHAT
# names the selection that ran and HINT what to check, for the message.
need_results() {
	if ! grep -q '^Benchmark' "$1"; then
		echo "$me: no benchmark result: $2 matched nothing${3:+ ($3)}" >&2
		exit 1
	fi
}
