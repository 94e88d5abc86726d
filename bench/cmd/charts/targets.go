package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// The performance targets, as ratios within one run.
const (
	maxVsFloor       = 1.5     // slidelimit's ns/op at most 1.5x the floor's, every workload
	minVsPeerMany    = 3.0     // at least 3x faster than the fastest peer on 1M keys
	minVsPeerHot     = 5.0     // and 5x on the hot key
	minScaling16     = 12.0    // distinct-key throughput from 1 to 16 cores
	maxBytesVsPeer   = 2.0 / 3 // bytes/key at most 2/3 of the smallest peer's
	self, floorName  = "slidelimit", "floor"
	scalingWorkload  = "1M-uniform"
	scalingFromProcs = 1
	scalingToProcs   = 16
)

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// nsAt returns the median ns/op of limiter on (workload, run) at procs, if measured.
func (d *data) nsAt(limiter, workload, run string, procs int) (float64, bool) {
	v, ok := d.nsPerOp[key{limiter, workload, run, procs}]
	if !ok {
		return 0, false
	}
	return median(v), true
}

// maxProcs returns the largest GOMAXPROCS measured for run on workload.
func (d *data) maxProcs(workload, run string) int {
	p := 0
	for k := range d.nsPerOp {
		if k.workload == workload && k.run == run {
			p = max(p, k.procs)
		}
	}
	return p
}

func isPeer(n string) bool { return n != self && n != floorName }

func targets(d *data) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| target | workload | slidelimit | reference | ratio | goal | |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---|\n")
	workloads := []string{}
	for k := range d.nsPerOp {
		if !slices.Contains(workloads, k.workload) {
			workloads = append(workloads, k.workload)
		}
	}
	slices.Sort(workloads) // "1", "1M-uniform", "1M-zipf"
	for _, w := range workloads {
		for _, run := range []string{"serial", "parallel"} {
			p := d.maxProcs(w, run)
			name := fmt.Sprintf("keys=%s %s-%d", w, run, p)
			sl, ok := d.nsAt(self, w, run, p)
			if !ok {
				continue
			}
			if fl, ok := d.nsAt(floorName, w, run, p); ok {
				r := sl / fl
				fmt.Fprintf(&b, "| ≤ %.1f× floor | %s | %.1f ns | floor %.1f ns | %.2f× | ≤ %.1f× | %s |\n",
					maxVsFloor, name, sl, fl, r, maxVsFloor, verdict(r <= maxVsFloor))
			}
			best, bestName := math.Inf(1), ""
			for _, lim := range d.limiters {
				if v, ok := d.nsAt(lim, w, run, p); ok && isPeer(lim) && v < best {
					best, bestName = v, lim
				}
			}
			if bestName != "" {
				goal := minVsPeerMany
				if w == "1" {
					goal = minVsPeerHot
				}
				r := best / sl
				fmt.Fprintf(&b, "| ≥ %.0f× fastest peer | %s | %.1f ns | %s %.1f ns | %.2f× | ≥ %.0f× | %s |\n",
					goal, name, sl, bestName, best, r, goal, verdict(r >= goal))
			}
		}
	}
	if t1, ok := d.nsAt(self, scalingWorkload, "parallel", scalingFromProcs); ok {
		top := d.maxProcs(scalingWorkload, "parallel")
		tn, _ := d.nsAt(self, scalingWorkload, "parallel", top)
		r := t1 / tn // throughput ratio = inverse ns/op ratio
		status := verdict(r >= minScaling16)
		if top < scalingToProcs {
			status = fmt.Sprintf("not measurable here (largest GOMAXPROCS %d; ideal %d×)", top, top)
		}
		fmt.Fprintf(&b, "| ≥ %.0f× scaling 1→16 cores | keys=%s parallel | %d→%d cores | | %.2f× | ≥ %.0f× | %s |\n",
			minScaling16, scalingWorkload, scalingFromProcs, top, r, minScaling16, status)
	}
	counts := []string{}
	for k := range d.bytesPerKey {
		if !slices.Contains(counts, k.workload) {
			counts = append(counts, k.workload)
		}
	}
	slices.SortFunc(counts, func(a, b string) int { return keysValue(a) - keysValue(b) })
	for _, c := range counts {
		v, ok := d.bytesPerKey[key{self, c, "", 0}]
		if !ok {
			continue
		}
		sl := median(v)
		best, bestName := math.Inf(1), ""
		for _, lim := range d.limiters {
			if pv, ok := d.bytesPerKey[key{lim, c, "", 0}]; ok && isPeer(lim) && median(pv) < best {
				best, bestName = median(pv), lim
			}
		}
		if bestName == "" {
			continue
		}
		r := sl / best
		fmt.Fprintf(&b, "| ≤ 2/3 smallest peer's bytes/key | keys=%s | %.1f B | %s %.1f B | %.2f× | ≤ 0.67× | %s |\n",
			c, sl, bestName, best, r, verdict(r <= maxBytesVsPeer))
	}
	return b.String()
}
