// Package forwarded reads and repairs values of the Forwarded header field (RFC 7239) as a proxy
// behind other proxies must: from the right, where the elements the trusted proxies appended are,
// whatever a client wrote before them. It is shared by httplimit, which reads the field, and the
// slidelimit command's proxy, which appends to it. Its functions are pure and safe for concurrent
// use.
package forwarded

import (
	"iter"
	"slices"
	"strings"
)

// Elements splits one Forwarded field value at the commas outside quoted strings, found from the
// right. A proxy appends its element to the end of the value it received, which a client may have
// begun with an unbalanced quote: read from the left, that quote would take in the elements the
// trusted proxies wrote after it, and the client would choose the hop that keys it. Read from the
// right, the proxies' well-formed elements come apart first, whatever the client left open before
// them.
func Elements(s string) []string {
	parts := slices.Collect(RightToLeft(s))
	slices.Reverse(parts)
	return parts
}

// RightToLeft yields the elements Elements returns, from the last to the first, finding each
// only when asked for it: a reader that stops at the first hop it does not trust never scans,
// nor allocates for, what a client wrote before it, however long.
func RightToLeft(s string) iter.Seq[string] {
	return func(yield func(string) bool) {
		end, quoted := len(s), false
		for i := len(s) - 1; i >= 0; i-- {
			switch s[i] {
			case '"':
				if !escaped(s, i) {
					quoted = !quoted
				}
			case ',':
				if !quoted {
					if !yield(s[i+1 : end]) {
						return
					}
					end = i
				}
			}
		}
		yield(s[:end])
	}
}

// escaped reports whether s[i] follows an odd run of backslashes, so that it is escaped inside a
// quoted string. Each run is counted once, by the quote after it, so a value is scanned in linear
// time.
func escaped(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// closeQuotes ends a quoted string that one element leaves open, as a client can write one, and
// drops every backslash outside a quoted string, where it escapes nothing (no token holds one) but
// a reader from the right, which cannot tell whether it is inside quotes, would take it for the
// escape of the quote after it. The element then reads the same from either side, and stays
// whole for a reader from the left once more elements follow it.
func closeQuotes(elem string) string {
	if strings.IndexByte(elem, '\\') < 0 {
		// Without escapes a quote opens or closes wherever it is: only the count matters, and
		// the element is kept without a copy.
		if strings.Count(elem, `"`)%2 == 1 {
			return elem + `"`
		}
		return elem
	}
	out := make([]byte, 0, len(elem)+2)
	quoted := false
	for i := 0; i < len(elem); i++ {
		switch c := elem[i]; {
		case c == '\\' && !quoted:
			// dropped
		case c == '\\':
			out = append(out, c)
			if i++; i < len(elem) {
				out = append(out, elem[i])
			} else {
				out = append(out, '\\') // the escape takes a backslash; the quote then closes
			}
		case c == '"':
			quoted = !quoted
			out = append(out, c)
		default:
			out = append(out, c)
		}
	}
	if quoted {
		out = append(out, '"')
	}
	if string(out) == elem {
		return elem
	}
	return string(out)
}

// Repair returns a Forwarded field value with every element's open quote closed and its stray
// backslashes dropped (see closeQuotes),
// the elements found from the right (see Elements): a value a trusted proxy appended to after a
// client's open quote then reads the same from either side.
func Repair(v string) string {
	// Most values need nothing: found without building the list of elements, which a client can
	// make as long as its header may be.
	clean := true
	for e := range RightToLeft(v) {
		if closeQuotes(e) != e {
			clean = false
			break
		}
	}
	if clean {
		return v
	}
	elems := Elements(v)
	for i, e := range elems {
		elems[i] = closeQuotes(e)
	}
	return strings.Join(elems, ",")
}
