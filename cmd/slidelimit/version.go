package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary is, when the build sets it:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/slidelimit
//
// Left empty, the module version recorded in the binary is used: the tag for "go install
// …@v1.2.3"; for a build in a git checkout with VCS stamping (-buildvcs=auto, the default), a
// pseudo-version of the commit, "+dirty" with local edits; "(devel)" without stamping.
var version = ""

type versionInfo struct {
	version, revision, goVersion string
	modified                     bool
}

func buildVersion() versionInfo {
	v := versionInfo{version: version, revision: "unknown", goVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.version == "" {
			v.version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.revision = s.Value
			case "vcs.modified":
				v.modified = s.Value == "true"
			}
		}
	}
	if v.version == "" {
		v.version = "(devel)"
	}
	return v
}

func versionMain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	v := buildVersion()
	rev := v.revision
	if v.modified {
		rev += " (modified)"
	}
	// A version that could not be written (a full disk, a closed pipe) is a failure, exit 1, not
	// an empty answer with exit 0.
	_, err := fmt.Fprintf(stdout, "slidelimit %s\nrevision %s\n%s %s/%s\n", v.version, rev, v.goVersion, runtime.GOOS, runtime.GOARCH)
	return err
}
