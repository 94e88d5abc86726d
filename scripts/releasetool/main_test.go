package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func write(t *testing.T, root, rel, data string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A tree shaped like the project's: the command requires the store and the root, the store the
// root; bench and scripts modules are not published.
func tree(t *testing.T) string {
	root := t.TempDir()
	write(t, root, "go.mod", "module example.com/r\n\ngo 1.26.0\n")
	write(t, root, "LICENSE", "the license\n")
	write(t, root, "r.go", "package r\n")
	write(t, root, "cmd/c/go.mod", "module example.com/r/cmd/c\n\ngo 1.26.0\n\nrequire (\n\texample.com/r v0.1.0\n\texample.com/r/store v0.1.0\n\tgolang.org/x/sys v0.1.0\n)\n")
	write(t, root, "cmd/c/main.go", "package main\n\nfunc main() {}\n")
	write(t, root, "store/go.mod", "module example.com/r/store\n\ngo 1.26.0\n\nrequire example.com/r v0.1.0\n")
	write(t, root, "store/s.go", "package store\n")
	write(t, root, "bench/go.mod", "module example.com/r/bench\n\ngo 1.26.0\n\nrequire example.com/r v0.1.0\n\nreplace example.com/r => ..\n")
	write(t, root, "scripts/tool/go.mod", "module example.com/r/scripts/tool\n\ngo 1.26.0\n")
	return root
}

func TestModulesInDependencyOrder(t *testing.T) {
	mods, err := findModules(tree(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range mods {
		got = append(got, m.dir+" "+m.path+" "+strings.Join(m.deps, ","))
	}
	want := []string{
		". example.com/r ",
		"store example.com/r/store example.com/r",
		"cmd/c example.com/r/cmd/c example.com/r,example.com/r/store",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("modules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestModulesRefuseReplace(t *testing.T) {
	root := tree(t)
	write(t, root, "store/go.mod", "module example.com/r/store\n\ngo 1.26.0\n\nrequire example.com/r v0.1.0\n\nreplace example.com/r => ../\n")
	_, err := findModules(root)
	if err == nil || !strings.Contains(err.Error(), "replace directive") {
		t.Fatalf("err = %v, want one naming the replace directive", err)
	}
}

func TestPublishWritesProxyLayout(t *testing.T) {
	root := tree(t)
	proxy := t.TempDir()
	if err := publish(proxy, "v0.1.0", root); err != nil {
		t.Fatal(err)
	}
	if err := publish(proxy, "v0.2.0", root); err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(proxy, "example.com", "r", "@v")
	list, err := os.ReadFile(filepath.Join(vdir, "list"))
	if err != nil || string(list) != "v0.1.0\nv0.2.0\n" {
		t.Fatalf("list = %q, %v", list, err)
	}
	for _, f := range []string{"v0.1.0.info", "v0.1.0.mod", "v0.1.0.zip"} {
		if _, err := os.Stat(filepath.Join(vdir, f)); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := modzip.CheckZip(module.Version{Path: "example.com/r", Version: "v0.1.0"}, filepath.Join(vdir, "v0.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	files := cf.Valid
	// The nested modules' files belong to their own zips.
	if strings.Join(files, ",") != "example.com/r@v0.1.0/LICENSE,example.com/r@v0.1.0/go.mod,example.com/r@v0.1.0/r.go" {
		t.Fatalf("zip holds %v, want only LICENSE, go.mod and r.go", files)
	}
	if err := publish(proxy, "1.0", root); err == nil {
		t.Fatal("publish accepted version 1.0")
	}
	// store has no LICENSE of its own: its zip would have none.
	if err := publish(proxy, "v0.1.0", filepath.Join(root, "store")); err == nil || !strings.Contains(err.Error(), "no LICENSE file") {
		t.Fatalf("publish of a module without a LICENSE: %v, want an error naming it", err)
	}
}

// Each published module carries a copy of the repository's LICENSE (publish refuses one without):
// the copies must stay the root's.
func TestLicenseCopiesAreTheRoots(t *testing.T) {
	want, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := findModules("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		got, err := os.ReadFile(filepath.Join("../..", m.dir, "LICENSE"))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s/LICENSE: %v; want a copy of the root's LICENSE", m.dir, err)
		}
	}
}
