package forwarded

import (
	"slices"
	"strings"
	"testing"
)

func TestElements(t *testing.T) {
	for in, want := range map[string][]string{
		`for=a`:                            {`for=a`},
		`for=a, for=b`:                     {`for=a`, ` for=b`},
		`for=a;host="x,y", for=b`:          {`for=a;host="x,y"`, ` for=b`},
		`for=6.6.6.6;x=", for=203.0.113.5`: {`for=6.6.6.6;x="`, ` for=203.0.113.5`},
		`for="9.9.9.9, for=203.0.113.5`:    {`for="9.9.9.9`, ` for=203.0.113.5`},
		`for=a;x="q\", r", for=b`:          {`for=a;x="q\", r"`, ` for=b`},
		`for=a;x="q\\", for=b`:             {`for=a;x="q\\"`, ` for=b`},
		``:                                 {``},
		`,`:                                {``, ``},
	} {
		if got := Elements(in); !slices.Equal(got, want) {
			t.Errorf("Elements(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRepair(t *testing.T) {
	for in, want := range map[string]string{
		`for=a, for=b`:                       `for=a, for=b`,
		`for=6.6.6.6;x=", for=203.0.113.5`:   `for=6.6.6.6;x="", for=203.0.113.5`,
		`for=6.6.6.6;x="a\`:                  `for=6.6.6.6;x="a\\"`,
		`for="[2001:db8::1]";proto=https`:    `for="[2001:db8::1]";proto=https`,
		`for=1;x=", for="[2001:db8::5]";p=h`: `for=1;x="", for="[2001:db8::5]";p=h`,
		// A backslash outside quotes escapes nothing from the left, but reads as an escape from
		// the right: dropped.
		`,\"`:            `,""`,
		`for=a\;x="b\""`: `for=a;x="b\""`,
	} {
		if got := Repair(in); got != want {
			t.Errorf("Repair(%q) = %q, want %q", in, got, want)
		}
		// Read from either side, a repaired value gives the same elements.
		if got := Repair(in); !slices.Equal(Elements(got), leftToRight(got)) {
			t.Errorf("Repair(%q) = %q reads %q from the right, %q from the left", in, got, Elements(got), leftToRight(got))
		}
	}
}

// leftToRight splits s at the commas outside quoted strings, read from the left.
func leftToRight(s string) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// FuzzRepair checks Repair's promise on any value: the repaired value reads the same from
// either side, a proxy's element appended to it comes apart as the last one both ways, and
// repairing twice changes nothing more.
func FuzzRepair(f *testing.F) {
	for _, s := range []string{`for=a, for=b`, `for=6.6.6.6;x=", for=203.0.113.5`, `for=6.6.6.6;x="a\`,
		`a\",b`, `"\\\"`, `,,""\`, `for="[2001:db8::1]";proto=https`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r := Repair(v)
		if !slices.Equal(Elements(r), leftToRight(r)) {
			t.Fatalf("Repair(%q) = %q reads %q from the right, %q from the left", v, r, Elements(r), leftToRight(r))
		}
		const proxy = `for=192.0.2.1;proto=https`
		for _, es := range [][]string{Elements(r + "," + proxy), leftToRight(r + "," + proxy)} {
			if es[len(es)-1] != proxy {
				t.Fatalf("Repair(%q) = %q: the appended element reads as %q", v, r, es)
			}
		}
		if rr := Repair(r); rr != r {
			t.Fatalf("Repair(%q) = %q, and again %q", v, r, rr)
		}
	})
}

// A value that needs no repair is returned as it is, without building the list of its elements:
// a client's long header costs the proxy that appends to it one scan.
func TestRepairOfACleanValueAllocatesNothing(t *testing.T) {
	v := strings.Repeat(`for=198.51.100.1;proto=http, for="[2001:db8::1]", `, 1000) + "for=203.0.113.9"
	if got := Repair(v); got != v {
		t.Fatalf("Repair changed a clean value")
	}
	if allocs := testing.AllocsPerRun(10, func() { Repair(v) }); allocs != 0 {
		t.Fatalf("Repair of a clean value: %v allocations, want 0", allocs)
	}
}
