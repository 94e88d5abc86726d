// Command slidelimit runs slidelimit's rate-limiting engine from the command line.
//
//	slidelimit [bench] [flags]   drive the engine with a built-in many-key workload (the default)
//	slidelimit proxy [flags]     a reverse proxy that rate-limits each client
//	slidelimit rls [flags]       Envoy rate limit service (see rls -h)
//	slidelimit load [flags]      an HTTP load generator; measures the proxy's overhead
//	slidelimit version           the version of this build
//	slidelimit help [COMMAND]    the commands, or a command's flags
//
// Run "slidelimit COMMAND -h" for a command's flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/slidelimit/slidelimit/policy"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `slidelimit: a sharded, lock-free sliding-window rate limiter.

Usage:
  slidelimit [bench] [flags]   drive the engine with a built-in many-key workload (the default)
  slidelimit proxy [flags]     a reverse proxy that rate-limits each client
  slidelimit rls [flags]       Envoy rate limit service (see rls -h)
  slidelimit load [flags]      an HTTP load generator; with no -url it measures the proxy's
                               overhead with and without limiting
  slidelimit version           the version of this build
  slidelimit help [COMMAND]    this text, or a command's flags

Run "slidelimit COMMAND -h" for a command's flags.
`

// commands are the commands run dispatches, for help.
var commands = []string{"bench", "proxy", "load", "rls", "version"}

// Exit codes: 0 success, 1 failure while running, 2 bad command line.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// errUsage marks a command-line error, already explained on stderr.
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	cmd, rest := "bench", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, rest = args[0], args[1:]
	}
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help":
			return writeUsage(stdout, stderr)
		case "-version", "--version":
			cmd, rest = "version", args[1:]
		}
	}
	var err error
	switch cmd {
	case "bench":
		err = benchMain(rest, stdout, stderr)
	case "proxy":
		err = proxyMain(rest, stdout, stderr)
	case "load":
		err = loadMain(rest, stdout, stderr)
	case "rls":
		err = rlsMain(rest, stdout, stderr)
	case "version":
		err = versionMain(rest, stdout, stderr)
	case "help":
		switch {
		case len(rest) == 0 || len(rest) == 1 && slices.Contains([]string{"help", "-h", "-help", "--help"}, rest[0]):
			return writeUsage(stdout, stderr)
		case len(rest) > 1 || strings.HasPrefix(rest[0], "-"):
			fmt.Fprintf(stderr, "slidelimit help: want at most one command, got %q\n\n%s", strings.Join(rest, " "), usage)
			return exitUsage
		case !slices.Contains(commands, rest[0]):
			fmt.Fprintf(stderr, "slidelimit: unknown command %q\n\n%s", rest[0], usage)
			return exitUsage
		}
		// "help proxy" is "proxy -h", written where help writes, so that it can be paged. The flag
		// package drops its write errors: a help that was not written exits 1, as usage's does.
		w := &firstErr{w: stdout}
		code := run([]string{rest[0], "-h"}, w, w)
		if w.err != nil && code == exitOK {
			fmt.Fprintf(stderr, "slidelimit help: writing the help: %v\n", w.err)
			return exitFail
		}
		return code
	default:
		fmt.Fprintf(stderr, "slidelimit: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	}
	fmt.Fprintf(stderr, "slidelimit %s: %s\n", cmd, oneLine(err.Error()))
	return exitFail
}

// closeBounded runs closeAll, the limiters' close at the end of a stop, and waits for it: with
// Redis (redis), for at most twice redisTimeout, since each call to Redis is bounded by it but a
// batched limiter's Close makes several in turn; and never once second (a second stop signal) is
// closed. What a hung Redis has not answered by then is left as a process that dies leaves it:
// leases stay counted until their window ages out, which only lowers admissions. It reports false
// when the bound, not the close or the signal, ended the wait.
func closeBounded(closeAll func(), redis bool, redisTimeout time.Duration, second <-chan struct{}) bool {
	closed := make(chan struct{})
	go func() { closeAll(); close(closed) }()
	var bound <-chan time.Time
	if redis {
		t := time.NewTimer(2 * redisTimeout)
		defer t.Stop()
		bound = t.C
	}
	select {
	case <-closed:
	case <-bound:
		return false
	case <-second:
	}
	return true
}

// oneLine returns s with each control character, line or paragraph separator (U+2028, U+2029)
// and byte of invalid UTF-8 written as a Go escape (\n, \x1b, \u2028, \xff). An error quotes some values as they were given (a file's path, a
// URL in a hint), and one holding a newline would otherwise print a line of its own, which a
// reader, or a log collector, takes for another message.
func oneLine(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || breaks(r) }) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case breaks(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// breaks reports whether r may break a line or drive a terminal: a control character, or a
// Unicode line or paragraph separator, at which some log viewers start a new line.
func breaks(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
}

// lineWriter writes log lines, each in one Write ending in a newline as log.Logger writes them,
// with the text before that newline passed through oneLine: a file name or an error holding a
// newline cannot start a line that reads as another message.
type lineWriter struct{ w io.Writer }

func (l lineWriter) Write(p []byte) (int, error) {
	text, nl := strings.CutSuffix(string(p), "\n")
	out := oneLine(text)
	if nl {
		out += "\n"
	}
	if _, err := io.WriteString(l.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeUsage writes the usage on stdout: exit 0, or 1 when it could not be written.
func writeUsage(stdout, stderr io.Writer) int {
	if _, err := fmt.Fprint(stdout, usage); err != nil {
		fmt.Fprintf(stderr, "slidelimit: writing the usage: %v\n", err)
		return exitFail
	}
	return exitOK
}

// firstErr is w, remembering the first error a write returned.
type firstErr struct {
	w   io.Writer
	err error
}

func (f *firstErr) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if err != nil && f.err == nil {
		f.err = err
	}
	return n, err
}

// flagOutput is a flag set's output: silent while the flag package parses (it would print its
// own error and every flag's default), so that parseFlags can say it better.
type flagOutput struct {
	w     io.Writer
	quiet bool
}

func (o *flagOutput) Write(b []byte) (int, error) {
	if o.quiet {
		return len(b), nil
	}
	return o.w.Write(b)
}

// newFlagSet returns a flag set that reports its own errors (naming the flag and the value) on
// stderr and returns them instead of exiting.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("slidelimit "+name, flag.ContinueOnError)
	out := &flagOutput{w: stderr}
	fs.SetOutput(out)
	fs.Usage = func() {
		if out.quiet {
			return
		}
		fmt.Fprintf(out, "Usage: %s\n", strings.TrimSpace("slidelimit "+name+" "+synopsis))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n == 0 {
			fmt.Fprintln(out, "\nIt takes no flags.")
			return
		}
		fmt.Fprint(out, "\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

var (
	invalidValueRE = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?(-\S+): (.*)$`)
)

// parseFlags parses args, explaining a parse error in one line that names the flag, the value
// and what to write instead (errUsage), printing the flags for -h (flag.ErrHelp), and refusing
// stray arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, _ := fs.Output().(*flagOutput)
	if out != nil {
		out.quiet = true
	}
	restore := decimalInts(fs)
	err := fs.Parse(args)
	restore()
	if out != nil {
		out.quiet = false
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return err
		}
		msg := err.Error()
		if m := invalidValueRE.FindStringSubmatch(msg); m != nil {
			why := m[3]
			switch why {
			case "parse error":
				why = "not a valid value"
				if f := fs.Lookup(strings.TrimPrefix(m[2], "-")); f != nil {
					if g, ok := f.Value.(flag.Getter); ok {
						switch g.Get().(type) {
						case bool:
							why = "want true or false, like " + m[2] + "=true"
						case int, int64, uint, uint64:
							why = "not a whole number"
						}
					}
				}
			case "value out of range":
				why = "out of range; write a smaller whole number"
			}
			msg = m[2] + " " + m[1] + ": " + why
		}
		return usageErr(fs, "%s", msg)
	}
	if fs.NArg() > 0 {
		// "-reference false" stops the flags at "false": a bool flag's value follows an '='.
		if i := len(args) - fs.NArg() - 1; i >= 0 {
			if _, err := strconv.ParseBool(fs.Arg(0)); err == nil {
				set := false // args[i] was read as a flag, not as the value of the one before it
				fs.Visit(func(f *flag.Flag) { set = set || "-"+f.Name == args[i] || "--"+f.Name == args[i] })
				if f := fs.Lookup(strings.TrimLeft(args[i], "-")); f != nil && set {
					if g, ok := f.Value.(flag.Getter); ok {
						if _, isBool := g.Get().(bool); isBool {
							return usageErr(fs, "unexpected argument %q: a bool flag takes its value after '=', like %s=%s", fs.Arg(0), args[i], fs.Arg(0))
						}
					}
				}
			}
		}
		return usageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// decimalInts makes fs's int and int64 flags read base 10 only, until the returned function puts
// the flag package's own values back. Those also read 0x10 as 16, 010 as 8 and 1_000 as 1000,
// where -rate's count, like every number in the README, is plain decimal: -limit 010 would be 8
// while -rate 010/1m is 10. Swapped only around Parse, so that -h still names them int.
func decimalInts(fs *flag.FlagSet) (restore func()) {
	var swapped []*flag.Flag
	var was []flag.Value
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		bits := 0
		switch g.Get().(type) {
		case int:
			bits = strconv.IntSize
		case int64:
			bits = 64
		default:
			return
		}
		swapped, was = append(swapped, f), append(was, f.Value)
		f.Value = decimalInt{Getter: g, bits: bits}
	})
	return func() {
		for i, f := range swapped {
			f.Value = was[i]
		}
	}
}

// decimalInt is an integer flag's own value, set from base-10 digits only (a sign allowed).
type decimalInt struct {
	flag.Getter
	bits int
}

func (d decimalInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, d.bits)
	if errors.Is(err, strconv.ErrRange) {
		// Past any flag's own range, which its check after parsing would name: say what to write.
		bound := int64(math.MaxInt64)
		if d.bits == 32 {
			bound = math.MaxInt32
		}
		return fmt.Errorf("out of range: beyond ±%d, far past what the flag takes; write a smaller whole number", bound)
	}
	if err != nil {
		return errors.New("not a whole number in decimal digits")
	}
	return d.Getter.Set(strconv.FormatInt(v, 10))
}

// usageErr prints a command-line error in the flag package's style and returns errUsage.
func usageErr(fs *flag.FlagSet, format string, a ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), oneLine(fmt.Sprintf(format, a...)))
	fmt.Fprintf(fs.Output(), "Run %q for the flags.\n", fs.Name()+" -h")
	return errUsage
}

// policyIDs are the registry ids -policy accepts, in the order the help lists them.
var policyIDs = []string{"sliding-counter", "fixed-window", "sliding-log", "token-bucket", "gcra", "leaky-bucket"}

// buildPolicy turns -policy, -limit and -window into a policy: the window policies take limit per
// window directly; the buckets take limit as their burst (or capacity) and refill it over one
// window, which must then come to a whole number of units per second. It returns an error naming
// the flag and the value.
func buildPolicy(id string, limit int64, windowFlag *time.Duration) (policy.Policy, error) {
	window, text := *windowFlag, typed(windowFlag)
	if limit < 1 || limit > policy.MaxLimit {
		return nil, fmt.Errorf("-limit %d: must be in [1, %d]", limit, int64(policy.MaxLimit))
	}
	if window < time.Millisecond || window%time.Millisecond != 0 || window > policy.MaxWindow {
		return nil, fmt.Errorf("-window %v: must be a whole number of milliseconds in [1ms, %v]", text, policy.MaxWindow)
	}
	perSecond := func() (int64, error) {
		ms := window.Milliseconds()
		if limit*1000%ms != 0 || limit*1000/ms < 1 {
			return 0, fmt.Errorf("-policy %s refills -limit units every -window, which must come to a whole number per second: -limit %d -window %v is %.3f/s", id, limit, text, float64(limit)/window.Seconds())
		}
		return limit * 1000 / ms, nil
	}
	var p policy.Policy
	switch id {
	case "sliding-counter":
		p = policy.SlidingCounter{Limit: limit, Window: window}
	case "fixed-window":
		p = policy.FixedWindow{Limit: limit, Window: window}
	case "sliding-log":
		p = policy.SlidingLog{Limit: limit, Window: window}
	case "token-bucket", "gcra", "leaky-bucket":
		rate, err := perSecond()
		if err != nil {
			return nil, err
		}
		switch id {
		case "token-bucket":
			p = policy.TokenBucket{Rate: rate, Burst: limit}
		case "gcra":
			p = policy.GCRA{Rate: rate, Burst: limit}
		default:
			p = policy.LeakyBucket{Rate: rate, Capacity: limit}
		}
	default:
		return nil, fmt.Errorf("-policy %q: unknown policy; one of %s", id, strings.Join(policyIDs, ", "))
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("-policy %s -limit %d -window %v: %v", id, limit, text, err)
	}
	return p, nil
}

// checkDenyMaxAge refuses a -redis-deny-max-age that redisstore would refuse, or one given with
// -redis-mode batched, which keeps no deny cache for it to bound.
func checkDenyMaxAge(dp *time.Duration, mode string) error {
	switch d := *dp; {
	case d < 0 || d > 0 && d < time.Millisecond:
		return fmt.Errorf("-redis-deny-max-age %v: must be 0 (until the retry time) or at least 1ms", typed(dp))
	case d > 0 && mode == "batched":
		return fmt.Errorf("-redis-deny-max-age %v: bounds the deny cache of -redis-mode exact; batched mode decides in process and keeps none", typed(dp))
	}
	return nil
}

// redisFlag is a flag that only Redis gives a meaning to, and its value.
type redisFlag struct {
	name  string
	value any
}

// checkRedisOnly refuses the first of flags that the command line set (set holds the names
// flag.Visit reports) although -redis is not given: in process such a flag changes nothing, and
// setting it, even to its default value, says that Redis was expected.
func checkRedisOnly(set map[string]bool, redisURL string, flags ...redisFlag) error {
	if redisURL != "" {
		return nil
	}
	for _, f := range flags {
		if set[f.name] {
			return fmt.Errorf("-%s %v: needs -redis URL (without -redis every limit is decided in process, where this flag changes nothing)", f.name, f.value)
		}
	}
	return nil
}

// checkRedisTimeout refuses a -redis-timeout outside the range both Redis backends take
// (redisstore.WithTimeout, batched.WithTimeout).
func checkRedisTimeout(d *time.Duration) error {
	if *d < time.Millisecond || *d > time.Minute {
		return fmt.Errorf("-redis-timeout %v: must be in [1ms, 1m]", typed(d))
	}
	return nil
}

// checkListenAddrs checks the main listener's address, which must be given (an empty one would
// listen on every interface, most likely from an unset variable), and the metrics listener's,
// where empty means none.
func checkListenAddrs(listen, metrics string) error {
	if listen == "" {
		return errors.New("-listen: empty; give host:port (port 0 picks a free one)")
	}
	if err := checkListenAddr("-listen", listen); err != nil {
		return err
	}
	return checkListenAddr("-metrics-listen", metrics)
}

// checkListenAddr refuses an address that net.Listen could never use whatever the machine, or
// would read as a port to pick: no port (an empty one too, which net.Listen reads as 0), a port
// that is not a number in [0, 65535] or a service name, or a host that is meant as an IP address
// but is not one (256.0.0.1). Such an address is a bad command line;
// one that parses but cannot be bound (in use, not local) stays a failure while running.
func checkListenAddr(flagName, addr string) error {
	if addr == "" {
		return nil // a listener that is off (-metrics-listen)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		why := err.Error()
		if errors.As(err, &ae) {
			why = ae.Err
		}
		return fmt.Errorf("%s %q: %s: write host:port, like 127.0.0.1:8080 (port 0 picks a free one)", flagName, addr, why)
	}
	n, perr := strconv.Atoi(port)
	switch {
	case port == "":
		// net.Listen would read it as port 0, and ":" as every interface on a random port: most
		// likely a port variable left unset, which is refused as an empty -listen is.
		return fmt.Errorf("%s %q: no port: write host:port, like 127.0.0.1:8080 (port 0 picks a free one)", flagName, addr)
	case perr == nil:
		if n < 0 || n > 65535 {
			return fmt.Errorf("%s %q: port %d is out of range [0, 65535]", flagName, addr, n)
		}
	default:
		if _, err := net.LookupPort("tcp", port); err != nil {
			return fmt.Errorf("%s %q: port %q is neither a number in [0, 65535] nor a service name", flagName, addr, port)
		}
	}
	if h, _, _ := strings.Cut(host, "%"); h != "" && strings.Trim(h, "0123456789.") == "" || strings.Contains(h, ":") {
		if _, err := netip.ParseAddr(h); err != nil {
			return fmt.Errorf("%s %q: %q is not an IP address", flagName, addr, host)
		}
	}
	return nil
}
