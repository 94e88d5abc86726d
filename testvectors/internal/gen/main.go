// Command gen writes the vector files under testvectors/data: the calls are defined in
// testvectors/internal/cases, the expectations come from the reference model, and every
// hand-worked expectation is checked against it. It fails (exit 1), writing nothing, on any
// disagreement.
//
//	go run ./testvectors/internal/gen -out testvectors/data
//
// With -check it writes nothing and exits 1 if any file under -out differs from what it would
// write.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/slidelimit/slidelimit/testvectors"
	"github.com/slidelimit/slidelimit/testvectors/internal/cases"
)

func main() {
	out := flag.String("out", "testvectors/data", "directory to write the vector files to")
	check := flag.Bool("check", false, "write nothing; exit 1 if a file in -out is not up to date")
	flag.Parse()
	if err := run(*out, *check); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out string, check bool) error {
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
	stale := 0
	for i, f := range files {
		path := filepath.Join(out, f.ID()+".json")
		if check {
			have, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(have, encoded[i]) {
				fmt.Fprintf(os.Stderr, "gen: %s is not up to date\n", path)
				stale++
			}
			continue
		}
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, encoded[i], 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %d cases, %d steps\n", path, len(f.Cases), steps(f))
	}
	if stale > 0 {
		return fmt.Errorf("%d files not up to date: run go run ./testvectors/internal/gen -out %s", stale, out)
	}
	return nil
}

func steps(f *testvectors.File) int {
	n := 0
	for _, c := range f.Cases {
		n += len(c.Steps)
	}
	return n
}
