// Command releasetool is what scripts/release-check uses to publish the project's modules into a
// file-based module proxy (the layout GOPROXY=file://DIR reads: MODULE/@v/list, VERSION.info,
// VERSION.mod, VERSION.zip). It is its own module, never published, so that golang.org/x/mod stays
// out of the root module's dependencies.
//
//	releasetool modules DIR
//	    prints the modules under DIR that users install, in dependency order (a module after every
//	    module of the project it requires), one per line: its directory relative to DIR, its path,
//	    and the comma-separated paths of the project's modules it requires ("-" for none). Modules
//	    under bench/ and scripts/ (benchmarks and tools) and in testdata or vendor are left out.
//	releasetool publish -proxy DIR -version VERSION MODDIR
//	    zips the module in MODDIR at VERSION with golang.org/x/mod/zip and adds it to the proxy.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "releasetool:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: releasetool modules DIR | releasetool publish -proxy DIR -version VERSION MODDIR")
	}
	switch args[0] {
	case "modules":
		if len(args) != 2 {
			return errors.New("usage: releasetool modules DIR")
		}
		mods, err := findModules(args[1])
		if err != nil {
			return err
		}
		for _, m := range mods {
			deps := "-"
			if len(m.deps) > 0 {
				deps = strings.Join(m.deps, ",")
			}
			fmt.Printf("%s\t%s\t%s\n", m.dir, m.path, deps)
		}
		return nil
	case "publish":
		fl := flag.NewFlagSet("publish", flag.ContinueOnError)
		proxy := fl.String("proxy", "", "the proxy's directory (created if missing)")
		version := fl.String("version", "", "the version to publish, such as v0.1.0")
		if err := fl.Parse(args[1:]); err != nil {
			return err
		}
		if *proxy == "" || fl.NArg() != 1 {
			return errors.New("usage: releasetool publish -proxy DIR -version VERSION MODDIR")
		}
		return publish(*proxy, *version, fl.Arg(0))
	}
	return fmt.Errorf("unknown command %q: want modules or publish", args[0])
}

type mod struct {
	dir, path string
	deps      []string // the project's modules it requires
}

// findModules walks root for go.mod files and orders the modules users install so that each
// comes after every module of the project it requires.
func findModules(root string) ([]mod, error) {
	byPath := map[string]*mod{}
	var order []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" ||
				rel == "bench" || rel == "scripts" || strings.HasPrefix(rel, "bench/") || strings.HasPrefix(rel, "scripts/")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		if f.Module == nil {
			return fmt.Errorf("%s: no module line", p)
		}
		if len(f.Replace) > 0 {
			return fmt.Errorf("%s: has a replace directive, which go install @version refuses", p)
		}
		m := &mod{dir: filepath.ToSlash(filepath.Dir(rel)), path: f.Module.Mod.Path}
		for _, r := range f.Require {
			m.deps = append(m.deps, r.Mod.Path) // filtered to the project's modules below
		}
		byPath[m.path] = m
		order = append(order, m.path)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, m := range byPath {
		m.deps = slices.DeleteFunc(m.deps, func(p string) bool { return byPath[p] == nil })
		slices.Sort(m.deps)
	}
	slices.Sort(order)
	var out []mod
	state := map[string]int{} // 1: being visited, 2: done
	var visit func(p string) error
	visit = func(p string) error {
		switch state[p] {
		case 1:
			return fmt.Errorf("modules require each other in a cycle through %s", p)
		case 2:
			return nil
		}
		state[p] = 1
		for _, d := range byPath[p].deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[p] = 2
		out = append(out, *byPath[p])
		return nil
	}
	for _, p := range order {
		if err := visit(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// publish writes MODULE/@v/VERSION.{info,mod,zip} for the module in dir and adds VERSION to
// MODULE/@v/list.
func publish(proxy, version, dir string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q: want a canonical semantic version such as v0.1.0", version)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	path := modfile.ModulePath(gomod)
	if path == "" {
		return fmt.Errorf("%s/go.mod: no module line", dir)
	}
	mv := module.Version{Path: path, Version: version}
	if err := module.Check(path, version); err != nil {
		return err
	}
	// A module's zip holds its own directory only: a LICENSE at the repository's root is not in
	// a nested module's, which would then be published with no license (and pkg.go.dev would
	// not show its documentation).
	if st, err := os.Stat(filepath.Join(dir, "LICENSE")); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%s: no LICENSE file in the module's directory: its zip would have no license", dir)
	}
	esc, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	var zbuf bytes.Buffer
	if err := modzip.CreateFromDir(&zbuf, mv, dir); err != nil {
		return fmt.Errorf("zipping %s: %w", mv, err)
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	for name, data := range map[string][]byte{version + ".info": info, version + ".mod": gomod, version + ".zip": zbuf.Bytes()} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	list, err := os.ReadFile(filepath.Join(vdir, "list"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(list))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	if err := os.WriteFile(filepath.Join(vdir, "list"), []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("published %s (%d bytes)\n", mv, zbuf.Len())
	return nil
}
