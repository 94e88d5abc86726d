package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const good = `{"policy": "rate-limiter/fixed-window", "version": 1, "cases": [
 {"name": "two", "params": {"limit": 1, "windowMs": 10}, "seed": 1, "steps": [
  {"call": "allow", "args": [1, 1, 0], "expect": true},
  {"call": "allow", "args": [1, 1, 5], "expect": %s}]}]}`

func TestReferenceRunCountsSteps(t *testing.T) {
	var out, errOut bytes.Buffer
	ok := write(t, "ok.json", strings.Replace(good, "%s", "false", 1))
	if code := run([]string{"-reference", ok}, &out, &errOut); code != 0 || out.String() != "2 passed, 0 failed\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	bad := write(t, "bad.json", strings.Replace(good, "%s", "true", 1))
	code := run([]string{"-reference", ok, bad}, &out, &errOut)
	want := bad + `: case "two" step 1: allow(1, 1, 5): expected true, got false` + "\n3 passed, 1 failed\n"
	if code != 1 || out.String() != want {
		t.Fatalf("exit %d, stdout %q, want %q", code, out.String(), want)
	}
}

func TestUnknownPolicyAndCallExit1(t *testing.T) {
	for _, body := range []string{
		`{"policy": "rate-limiter/nope", "version": 1, "cases": []}`,
		`{"policy": "rate-limiter/gcra", "version": 1, "cases": [{"name": "x", "params": {"ratePerSec": 1, "burst": 1}, "steps": [{"call": "take", "args": [], "expect": 0}]}]}`,
	} {
		var out, errOut bytes.Buffer
		if code := run([]string{write(t, "f.json", body)}, &out, &errOut); code != 1 || out.String() != "0 passed, 0 failed\n" || errOut.Len() == 0 {
			t.Errorf("exit %d, stdout %q, stderr %q; want 1, a closing line and an error", code, out.String(), errOut.String())
		}
	}
}

func TestNoFilesIsUsageError(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "usage") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}

// -h asks for the usage: it is printed, exit 0; an unknown flag is a usage error, exit 2.
func TestHelpIsNotAnError(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-h"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "usage") {
		t.Fatalf("-h: exit %d, stderr %q", code, errOut.String())
	}
	if code := run([]string{"-nosuchflag"}, &out, &errOut); code != 2 {
		t.Fatalf("-nosuchflag: exit %d, want 2", code)
	}
}
