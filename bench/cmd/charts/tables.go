package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// tables renders the medians as markdown: ns/op (with allocs/op where not zero) for every
// workload, run and GOMAXPROCS, one column per limiter; the smallest share of admitted requests;
// and bytes per key.
func tables(d *data) string {
	var b strings.Builder
	var rows []key // limiter unset: the row's workload, run and procs
	for k := range d.nsPerOp {
		r := key{workload: k.workload, run: k.run, procs: k.procs}
		if !slices.Contains(rows, r) {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b key) int {
		return strings.Compare(fmt.Sprintf("%s/%s/%03d", a.workload, a.run, a.procs), fmt.Sprintf("%s/%s/%03d", b.workload, b.run, b.procs))
	})
	var lims []string
	for _, l := range d.limiters {
		for k := range d.nsPerOp {
			if k.limiter == l {
				lims = append(lims, l)
				break
			}
		}
	}
	if len(rows) > 0 {
		fmt.Fprintf(&b, "Median ns/op (allocs/op in brackets where not zero):\n\n| workload | run | cores |")
		for _, l := range lims {
			fmt.Fprintf(&b, " %s |", l)
		}
		fmt.Fprintf(&b, "\n|---|---|---:|%s\n", strings.Repeat("---:|", len(lims)))
		minAdmitted, where := math.Inf(1), ""
		for _, r := range rows {
			fmt.Fprintf(&b, "| keys=%s | %s | %d |", r.workload, r.run, r.procs)
			for _, l := range lims {
				k := key{l, r.workload, r.run, r.procs}
				v, ok := d.nsPerOp[k]
				if !ok {
					b.WriteString(" – |")
					continue
				}
				cell := fmt.Sprintf("%.1f", median(v))
				if a, ok := d.allocsPerOp[k]; ok && median(a) > 0 {
					cell += fmt.Sprintf(" (%g)", median(a))
				}
				if a, ok := d.admitted[k]; ok && slices.Min(a) < minAdmitted {
					minAdmitted, where = slices.Min(a), fmt.Sprintf("%s, keys=%s %s-%d", l, r.workload, r.run, r.procs)
				}
				fmt.Fprintf(&b, " %s |", cell)
			}
			b.WriteString("\n")
		}
		if where != "" {
			fmt.Fprintf(&b, "\nAdmitted: at least %.4f of the requests in every result (lowest: %s).\n", minAdmitted, where)
		}
	}
	if len(d.bytesPerKey) > 0 {
		var counts []string
		for k := range d.bytesPerKey {
			if !slices.Contains(counts, k.workload) {
				counts = append(counts, k.workload)
			}
		}
		slices.SortFunc(counts, func(a, b string) int { return keysValue(a) - keysValue(b) })
		fmt.Fprintf(&b, "\nHeap bytes per tracked key:\n\n| limiter |")
		for _, c := range counts {
			fmt.Fprintf(&b, " keys=%s |", c)
		}
		fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("---:|", len(counts)))
		for _, l := range d.limiters {
			line, any := fmt.Sprintf("| %s |", l), false
			for _, c := range counts {
				if v, ok := d.bytesPerKey[key{l, c, "", 0}]; ok {
					line += fmt.Sprintf(" %.1f |", median(v))
					any = true
				} else {
					line += " – |"
				}
			}
			if any {
				b.WriteString(line + "\n")
			}
		}
	}
	return b.String()
}
