package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/testvectors/internal/cases"
)

// TestModuleRoot: from this package's directory (go test runs it there), a relative -out is taken
// from the repository root, where the vector files are, and not from here.
func TestModuleRoot(t *testing.T) {
	dir, _, err := resolve("testvectors/data")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "gcra.json")); err != nil {
		t.Fatalf("resolve(testvectors/data) = %s: %v", dir, err)
	}
}

func TestModulePathOf(t *testing.T) {
	for _, tc := range []struct{ gomod, want string }{
		{"module github.com/slidelimit/slidelimit\n\ngo 1.26.0\n", modulePath},
		{"// A comment.\nmodule \"github.com/slidelimit/slidelimit\" // quoted\n", modulePath},
		{"module github.com/slidelimit/slidelimit/bench\n", modulePath + "/bench"},
		{"modulex github.com/slidelimit/slidelimit\n", ""},
		{"go 1.26.0\n", ""},
	} {
		path := filepath.Join(t.TempDir(), "go.mod")
		if err := os.WriteFile(path, []byte(tc.gomod), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := modulePathOf(path); got != tc.want {
			t.Errorf("modulePathOf(%q) = %q, want %q", tc.gomod, got, tc.want)
		}
	}
	if got := modulePathOf(filepath.Join(t.TempDir(), "go.mod")); got != "" {
		t.Errorf("modulePathOf(missing file) = %q, want \"\"", got)
	}
}

// TestRunOut: gen creates no -out directory, and -check tells a file it cannot read from a stale
// one.
func TestRunOut(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, check := range []bool{false, true} {
		if err := run(missing, check); err == nil || !strings.Contains(err.Error(), "no such file or directory") {
			t.Errorf("run(missing dir, check=%v) = %v, want no such file or directory", check, err)
		}
		if _, err := os.Stat(missing); err == nil {
			t.Fatalf("run(missing dir, check=%v) created it", check)
		}
	}

	files, err := cases.Build()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err, want := run(dir, true), fmt.Sprintf("%d files cannot be read", len(files)); err == nil || err.Error() != want {
		t.Errorf("run(empty dir, check) = %v, want %s", err, want)
	}
	if err := run(dir, false); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, true); err != nil {
		t.Errorf("run(dir just written, check) = %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "gcra.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fixed-window.json"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, true); err == nil || err.Error() != "1 files cannot be read and 1 are not up to date" {
		t.Errorf("run(dir, check) = %v, want 1 files cannot be read and 1 are not up to date", err)
	}
}

// TestParseArgs: an argument after the flags is refused, not dropped.
func TestParseArgs(t *testing.T) {
	out, check, err := parseArgs([]string{"-out", "x", "-check"})
	if err != nil || out != "x" || !check {
		t.Errorf("parseArgs(-out x -check) = %q, %v, %v; want x, true, nil", out, check, err)
	}
	for _, args := range [][]string{{"-check", "testvectors/data"}, {"-out", "x", "y"}} {
		_, _, err := parseArgs(args)
		if err == nil || !strings.Contains(err.Error(), "unexpected argument") || !strings.Contains(err.Error(), args[len(args)-1]) {
			t.Errorf("parseArgs(%q) = %v, want an unexpected argument error naming %q", args, err, args[len(args)-1])
		}
	}
	if _, _, err := parseArgs([]string{"-nosuch"}); err == nil {
		t.Error("parseArgs(-nosuch) = nil error")
	}
}
