// Command vectors runs registry-format vector files through the engine, with a manual clock and
// eviction off, and prints one line per failing step, then a closing line "N passed, M failed"
// counting steps. It exits 1 on any failing step, on a file it cannot read or check (an unknown
// policy id or call, a malformed case), and 2 on bad usage.
//
//	go run ./testvectors/cmd/vectors testvectors/data/*.json
//	go run ./testvectors/cmd/vectors -reference testvectors/data/*.json
//
// -reference runs the files through the reference model (internal/reference) instead, to check
// the files themselves.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/slidelimit/slidelimit/testvectors"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vectors", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ref := fs.Bool("reference", false, "run the files through the reference model instead of the engine")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: vectors [-reference] FILE...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for: the usage is the answer
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	runFile := testvectors.Run
	if *ref {
		runFile = testvectors.RunReference
	}
	passed, failed, broken := 0, 0, false
	for _, path := range fs.Args() {
		f, err := testvectors.Load(path)
		if err != nil {
			fmt.Fprintln(stderr, "vectors:", err)
			broken = true
			continue
		}
		p, n, err := runFile(f, stdout)
		if err != nil {
			fmt.Fprintln(stderr, "vectors:", err)
			broken = true
			continue
		}
		passed += p
		failed += n
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 || broken {
		return 1
	}
	return 0
}
