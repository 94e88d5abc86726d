// Command gen writes the vector files under testvectors/data: the calls are defined in
// testvectors/internal/cases, the expectations come from the reference model, and every
// hand-worked expectation is checked against it. It fails (exit 1), writing nothing, on any
// disagreement.
//
//	go run ./testvectors/internal/gen -out testvectors/data
//
// With -check it writes nothing and exits 1 if any file under -out differs from what it would
// write, or cannot be read.
//
// A relative -out is taken from the root of the slidelimit module (the directory of the go.mod
// that declares it, found above the current directory), not from the current directory: run from
// bench/, say, the command above would otherwise check or write a second set of files under
// bench/testvectors/data. -out must be an existing directory; gen creates none.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/slidelimit/slidelimit/testvectors"
	"github.com/slidelimit/slidelimit/testvectors/internal/cases"
)

// modulePath is the module whose root a relative -out is taken from.
const modulePath = "github.com/slidelimit/slidelimit"

func main() {
	out, check, err := parseArgs(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(2)
	}
	if err := run(out, check); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// parseArgs reads gen's flags. An argument left after them is an error: "gen -check
// testvectors/data" would otherwise check the default -out and say nothing of the directory the
// caller named.
func parseArgs(args []string) (out string, check bool, err error) {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	o := fs.String("out", "testvectors/data", "existing directory to write the vector files to; a relative one is taken from the module's root")
	c := fs.Bool("check", false, "write nothing; exit 1 if a file in -out is not up to date or cannot be read")
	if err := fs.Parse(args); err != nil {
		return "", false, err
	}
	if fs.NArg() > 0 {
		return "", false, fmt.Errorf("unexpected argument %q: name the directory with -out, before any other argument", fs.Arg(0))
	}
	return *o, *c, nil
}

func run(out string, check bool) error {
	dir, shown, err := resolve(out)
	if err != nil {
		return err
	}
	// A missing -out is most likely a typo or a path taken from the wrong directory: creating it
	// would leave a second set of files that nothing reads, and checking it would call every file
	// stale.
	where := out
	if shown != out {
		where = fmt.Sprintf("%s (%s from here)", out, shown)
	}
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("-out %s: %v (gen creates no directory)", where, withoutPath(err))
	} else if !st.IsDir() {
		return fmt.Errorf("-out %s: not a directory", where)
	}
	files, err := cases.Build()
	if err != nil {
		return err
	}
	encoded := make([][]byte, len(files))
	for i, f := range files {
		var b bytes.Buffer
		if err := testvectors.Encode(&b, f); err != nil {
			return err
		}
		// Read back what would be written and replay it on the reference model: the round trip
		// through the JSON must not change a single expectation.
		back, err := testvectors.Parse(f.Path, b.Bytes())
		if err != nil {
			return fmt.Errorf("re-reading %s: %w", f.Path, err)
		}
		var failures bytes.Buffer
		if _, failed, err := testvectors.RunReference(back, &failures); err != nil || failed > 0 {
			return fmt.Errorf("replaying %s on the reference model: %v\n%s", f.Path, err, failures.String())
		}
		encoded[i] = b.Bytes()
	}
	stale, unread := 0, 0
	for i, f := range files {
		path := filepath.Join(dir, f.ID()+".json")
		name := filepath.Join(shown, f.ID()+".json")
		if check {
			have, err := os.ReadFile(path)
			if err != nil {
				// Not "not up to date": the file may well be, and regenerating would not help.
				fmt.Fprintf(os.Stderr, "gen: cannot read %s: %v\n", name, withoutPath(err))
				unread++
			} else if !bytes.Equal(have, encoded[i]) {
				fmt.Fprintf(os.Stderr, "gen: %s is not up to date\n", name)
				stale++
			}
			continue
		}
		if err := os.WriteFile(path, encoded[i], 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %d cases, %d steps\n", name, len(f.Cases), steps(f))
	}
	switch {
	case unread > 0 && stale > 0:
		return fmt.Errorf("%d files cannot be read and %d are not up to date", unread, stale)
	case unread > 0:
		return fmt.Errorf("%d files cannot be read", unread)
	case stale > 0:
		return fmt.Errorf("%d files not up to date: run go run ./testvectors/internal/gen -out %s (from the repository root)", stale, out)
	}
	return nil
}

// resolve returns the directory that out names (a relative out is taken from the module's root)
// and that directory as the messages show it: relative to the current directory, so that the
// paths printed are the ones to type from here.
func resolve(out string) (dir, shown string, err error) {
	if filepath.IsAbs(out) {
		return out, out, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	root, err := moduleRoot(wd)
	if err != nil {
		return "", "", err
	}
	dir = filepath.Join(root, out)
	shown = dir
	if rel, err := filepath.Rel(wd, dir); err == nil {
		shown = rel
	}
	return dir, shown, nil
}

// moduleRoot returns the nearest directory, from dir up, whose go.mod declares modulePath. The
// nested modules (bench, redisstore, ...) have go.mod files of their own and are passed over.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; {
		if modulePathOf(filepath.Join(d, "go.mod")) == modulePath {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod of %s in %s or above it: run gen from within the repository, or give an absolute -out", modulePath, dir)
		}
		d = up
	}
}

// modulePathOf returns the module path that the go.mod file at path declares, or "" if it has
// none or cannot be read.
func modulePathOf(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			if i := strings.Index(rest, "//"); i >= 0 {
				rest = rest[:i]
			}
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// withoutPath returns a file operation's error without the path it quotes (the messages name the
// file as seen from the current directory instead).
func withoutPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func steps(f *testvectors.File) int {
	n := 0
	for _, c := range f.Cases {
		n += len(c.Steps)
	}
	return n
}
