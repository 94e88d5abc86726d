package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"

	"github.com/slidelimit/slidelimit/httplimit"
)

// fileConfig is the -config file:
//
//	exempt:
//	  paths: [/healthz, /ready]     # path prefixes never limited
//	  cidrs: [10.0.0.0/8]           # client addresses never limited
//	rules:                          # the first rule that matches decides
//	  - name: login
//	    methods: [POST]             # any method when left out
//	    paths: [/login, /session]   # path prefixes; any path when left out
//	    rates: [5/1m, 20/1h]        # as -rate; all must admit
//	    policy: gcra                # default: -policy
//	    key: ip                     # ip, header:NAME, conn or path; default: -key
//
// A request that no rule matches is limited by the command line's limits (-rate, or -limit and
// -window), under the name -name.
type fileConfig struct {
	Exempt struct {
		Paths []string `yaml:"paths"`
		CIDRs []string `yaml:"cidrs"`
	} `yaml:"exempt"`
	Rules []fileRule `yaml:"rules"`
}

type fileRule struct {
	Name    string   `yaml:"name"`
	Methods []string `yaml:"methods"`
	Paths   []string `yaml:"paths"`
	Rates   []string `yaml:"rates"`
	Policy  string   `yaml:"policy"`
	Key     string   `yaml:"key"`
}

// ruleSpec is one validated rule.
type ruleSpec struct {
	name      string
	methods   []string // upper case; nil: any
	listsHead bool     // HEAD is in methods: see firstMatch
	prefixes  []string // nil: any
	rates     []rate
	policyID  string
	key       string
	where     string // "rules[2] (login)" for a rule of the -config file; "": the command line's
}

// configSpec is a validated configuration: the rules in order, the default rule last.
type configSpec struct {
	rules       []ruleSpec
	exemptPaths []string
	exemptCIDRs []netip.Prefix
}

// parseConfigFile reads and validates the -config file, returning an error that names the file,
// the rule and the field at fault.
func parseConfigFile(path string, def ruleSpec) (*configSpec, error) {
	b, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	spec, err := parseConfig(b, def)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

// maxConfigBytes bounds the -config file: a rules file is kilobytes, and a path that names
// something endless (/dev/zero) must get an error, not take the process's memory.
const maxConfigBytes = 16 << 20

// readConfigFile reads the -config file, which must be a regular file (a FIFO would block the
// read, and with it start-up and the stop signals) of at most maxConfigBytes.
func readConfigFile(path string) ([]byte, error) {
	return readRegularFile(path, maxConfigBytes, "rules file")
}

// readRegularFile reads path, which must be a regular file of at most limit bytes: what a path
// names may be endless (/dev/zero) or block the read (a FIFO), and a file the process must read
// then takes its memory, or holds up start-up and the stop signals. kind names what no larger
// file is, for the error.
func readRegularFile(path string, limit int, kind string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%v)", path, st.Mode().Type())
	}
	// Opened without blocking, and checked again once open: the path may have been replaced by a
	// FIFO since the Stat.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%s: larger than %d MiB, which no %s is", path, limit>>20, kind)
	}
	return b, nil
}

func parseConfig(b []byte, def ruleSpec) (*configSpec, error) {
	var fc fileConfig
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, errors.New(yamlError(err))
	}
	// A second document would be read by nothing: a file made by joining two (a base and an
	// overlay, say) would lose the second's rules without a word. An empty or null one (a
	// trailing ---, ~, {}) holds nothing to lose.
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errors.New(yamlError(err))
		}
		if len(more.Content) > 0 && !emptyNode(more.Content[0]) {
			return nil, fmt.Errorf("line %d: a second YAML document (each --- starts one); put every rule and exemption in one", more.Line)
		}
	}
	if len(doc.Content) > 0 {
		// Checked by hand before decoding: yaml's own errors name Go types (main.fileRule),
		// not the rule, and span several lines.
		if err := checkShape(doc.Content[0]); err != nil {
			return nil, err
		}
		if err := doc.Content[0].Decode(&fc); err != nil {
			return nil, errors.New(yamlError(err))
		}
	}
	if len(fc.Rules) == 0 && len(fc.Exempt.Paths) == 0 && len(fc.Exempt.CIDRs) == 0 {
		// An empty file is more often one caught half written (a poll between an editor's
		// truncate and its write) than a wish: applied, it would drop every rule and reset their
		// counts until the next poll brought them back.
		return nil, errors.New("no rules and no exemptions (an empty file, or one read while it was being written?); to limit by the command line alone, leave out -config")
	}
	spec := &configSpec{}
	for _, p := range fc.Exempt.Paths {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("exempt.paths: %q must start with /", p)
		}
		if err := checkCleanPath(p); err != nil {
			return nil, fmt.Errorf("exempt.paths: %v", err)
		}
		spec.exemptPaths = append(spec.exemptPaths, p)
	}
	for _, c := range fc.Exempt.CIDRs {
		ps, err := httplimit.ParsePrefixes(c)
		if errors.Is(err, httplimit.ErrShortMappedPrefix) {
			return nil, fmt.Errorf("exempt.cidrs: %v", err)
		}
		if err != nil {
			return nil, fmt.Errorf("exempt.cidrs: %q is neither an address nor a CIDR range", c)
		}
		spec.exemptCIDRs = append(spec.exemptCIDRs, ps...)
	}
	names := map[string]bool{def.name: true}
	for i, fr := range fc.Rules {
		where := fmt.Sprintf("rules[%d]", i)
		if fr.Name != "" {
			where += " (" + shownName(fr.Name) + ")"
		}
		if err := checkName(fr.Name); err != nil {
			return nil, fmt.Errorf("%s: name %v", where, err)
		}
		if names[fr.Name] {
			return nil, fmt.Errorf("%s: name %q is used twice (the command line's limits are named %q)", where, fr.Name, def.name)
		}
		names[fr.Name] = true
		r := ruleSpec{name: fr.Name, policyID: def.policyID, key: def.key, where: where}
		for _, m := range fr.Methods {
			if m == "" || strings.IndexFunc(m, func(r rune) bool { return !httpguts.IsTokenRune(r) }) >= 0 {
				return nil, fmt.Errorf("%s: methods: %q is not an HTTP method", where, m)
			}
			r.methods = append(r.methods, strings.ToUpper(m))
		}
		for _, p := range fr.Paths {
			if !strings.HasPrefix(p, "/") {
				return nil, fmt.Errorf("%s: paths: %q must start with /", where, p)
			}
			if err := checkCleanPath(p); err != nil {
				return nil, fmt.Errorf("%s: paths: %v", where, err)
			}
			if w := withoutParams(p); w != p {
				// Rules match the path with its ;parameters removed (see withoutParams).
				return nil, fmt.Errorf("%s: paths: %q holds a ;parameter, which rules match without: write %q", where, p, w)
			}
			r.prefixes = append(r.prefixes, p)
		}
		if len(fr.Rates) == 0 {
			return nil, fmt.Errorf("%s: rates: at least one, like [10/1s, 1000/1h]", where)
		}
		for _, s := range fr.Rates {
			rt, err := parseRate(s)
			if err != nil {
				return nil, fmt.Errorf("%s: rates: %v", where, err)
			}
			r.rates = append(r.rates, rt)
		}
		if fr.Policy != "" {
			if !contains(policyIDs, fr.Policy) {
				return nil, fmt.Errorf("%s: policy %q: unknown policy; one of %s", where, fr.Policy, strings.Join(policyIDs, ", "))
			}
			r.policyID = fr.Policy
		}
		if fr.Key != "" {
			r.key = fr.Key
		}
		if err := checkKey(r.key); err != nil {
			return nil, fmt.Errorf("%s: key %v", where, err)
		}
		if err := checkRates(r.rates); err != nil {
			return nil, fmt.Errorf("%s: rates: %v", where, err)
		}
		spec.rules = append(spec.rules, r)
	}
	for i := range spec.rules {
		spec.rules[i].listsHead = slices.Contains(spec.rules[i].methods, http.MethodHead)
	}
	spec.rules = append(spec.rules, def)
	if err := checkLimitNames(spec.rules); err != nil {
		return nil, err
	}
	return spec, nil
}

// checkLimitNames refuses two limits of the same name: a rule "api" with several rates names its
// limits "api-1m", "api-1h", which a rule named "api-1m" would share in the fields, and on Redis
// in its keys, so that the two rules would count into one another's windows.
func checkLimitNames(rules []ruleSpec) error {
	type owner struct {
		rule  *ruleSpec
		label string
	}
	seen := map[string]owner{}
	describe := func(o owner) string {
		switch {
		case o.rule.where == "" && o.label == "":
			return "the command line's limit"
		case o.rule.where == "":
			return "the command line's " + o.label + " limit"
		case o.label == "":
			return o.rule.where
		}
		return fmt.Sprintf("%s's %s limit", o.rule.where, o.label)
	}
	for i := range rules {
		r := &rules[i]
		for _, rt := range r.rates {
			o := owner{rule: r}
			name := r.name
			if len(r.rates) > 1 {
				o.label = rt.label()
				name += "-" + o.label
			}
			if prev, ok := seen[name]; ok && prev.rule != r {
				if o.rule.where == "" { // the file's rule is at fault, not the command line
					o, prev = prev, o
				}
				return fmt.Errorf("%s and %s are both named %q (in the RateLimit fields and the Redis keys); rename one of the rules", describe(o), describe(prev), name)
			}
			seen[name] = o
		}
	}
	return nil
}

// checkName accepts a rule name: it becomes part of the RateLimit fields, of Redis key names and
// of metric labels.
func checkName(n string) error {
	if n == "" || len(n) > 64 {
		return fmt.Errorf("%q: must be 1 to 64 characters", n)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%q: only letters, digits, '-', '_' and '.'", n)
		}
	}
	return nil
}

// checkRates refuses two limits with one window: their names (rule-window) would collide.
func checkRates(rs []rate) error {
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.label()] {
			return fmt.Errorf("two limits with the window %s: give each window one limit", r.label())
		}
		seen[r.label()] = true
	}
	return nil
}

// shownName is a rule's name as errors show it: as written, or quoted (%q) when it holds a
// character that would break the one-line error (a newline, a terminal escape); checkName refuses
// such a name anyway.
func shownName(name string) string {
	if strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(name)
	}
	return name
}

// firstMatch returns the index of the first of n rules (the i-th is rule(i)) that applies to a
// request with method and path, or -1. HEAD falls under a rule for GET, whose handler most servers
// run for it (Go's ServeMux, Express, Flask, Rails), unless a rule that lists HEAD itself matches
// the path: that one decides it, wherever it stands. Where none does, a rule for GET must still
// limit HEAD: a HEAD rule for /status took HEAD /admin out of a GET rule for /admin.
func firstMatch(n int, rule func(i int) *ruleSpec, method, path string) int {
	getTakesHead := true
	if strings.EqualFold(method, http.MethodHead) {
		for i := range n {
			if r := rule(i); r.listsHead && r.matchesPath(path) {
				getTakesHead = false
				break
			}
		}
	}
	for i := range n {
		if rule(i).matches(method, path, getTakesHead) {
			return i
		}
	}
	return -1
}

// matches reports whether r applies to a request with method and path; getTakesHead says whether
// a GET in r's methods takes HEAD (see firstMatch).
func (r *ruleSpec) matches(method, path string, getTakesHead bool) bool {
	if r.methods != nil {
		ok := false
		for _, m := range r.methods {
			// In any case: frameworks that upper-case the method (WSGI's REQUEST_METHOD) serve
			// "post" as POST, so a rule for POST must limit it too.
			if strings.EqualFold(m, method) || getTakesHead && m == http.MethodGet && strings.EqualFold(method, http.MethodHead) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return r.matchesPath(path)
}

// matchesPath reports whether one of r's prefixes, if it has any, begins path.
func (r *ruleSpec) matchesPath(path string) bool {
	if r.prefixes == nil {
		return true
	}
	for _, p := range r.prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// yamlError is a yaml error on one line, without the "yaml: " prefix and the list framing of
// "unmarshal errors".
func yamlError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	var parts []string
	for l := range strings.SplitSeq(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

var (
	topFields    = []string{"exempt", "rules"}
	exemptFields = []string{"paths", "cidrs"}
	ruleFields   = []string{"name", "methods", "paths", "rates", "policy", "key"}
)

// emptyNode reports whether n holds nothing: a null, or a mapping or sequence with no items.
func emptyNode(n *yaml.Node) bool {
	n = deref(n)
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Tag == "!!null"
	case yaml.MappingNode, yaml.SequenceNode:
		return len(n.Content) == 0
	}
	return false
}

// checkShape checks that the document is made of the fields fileConfig has, each of the right
// kind, and names the line, the rule and the field of the first that is not. Aliases (*name) are
// followed and merge keys (<<) read as yaml does, so that a file is checked as it is decoded.
func checkShape(top *yaml.Node) error {
	if top = deref(top); top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil
	}
	done := map[mapped]map[string]*yaml.Node{}
	fields, err := mapping(top, "the file", topFields, done)
	if err != nil {
		return err
	}
	if n := fields["exempt"]; n != nil && deref(n).Tag != "!!null" { // exempt: ~ is no exemption, as rules: ~ is no rule
		ex, err := mapping(n, "exempt", exemptFields, done)
		if err != nil {
			return err
		}
		for _, f := range exemptFields {
			if err := list(ex[f], "exempt."+f, listExamples[f]); err != nil {
				return err
			}
		}
	}
	n := fields["rules"]
	if n == nil || deref(n).Tag == "!!null" {
		return nil
	}
	if deref(n).Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: rules: want a list of rules", n.Line)
	}
	for i, rn := range deref(n).Content {
		where := fmt.Sprintf("rules[%d]", i)
		if r := deref(rn); r.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(r.Content); j += 2 {
				if k, v := deref(r.Content[j]), deref(r.Content[j+1]); k.Value == "name" && v.Kind == yaml.ScalarNode && v.Value != "" {
					where += " (" + shownName(v.Value) + ")"
					break // a second name is refused below, as any field given twice
				}
			}
		}
		rf, err := mapping(rn, where, ruleFields, done)
		if err != nil {
			return err
		}
		for _, f := range []string{"methods", "paths", "rates"} {
			if err := list(rf[f], where+": "+f, listExamples[f]); err != nil {
				return err
			}
		}
		for _, f := range []string{"methods", "paths"} {
			// Read as "no restriction", an empty list, or a field left with no value (every item
			// commented out), would make the rule take every request: the opposite of what it
			// seems to say. An explicit ~ says "any" on purpose, as a rule that merges another's
			// fields needs to say it.
			if v := deref(rf[f]); v != nil && (v.Kind == yaml.SequenceNode && len(v.Content) == 0 || v.Tag == "!!null" && v.Value == "") {
				return fmt.Errorf("line %d: %s: %s: an empty list; leave the field out, or write ~, to match every %s", rf[f].Line, where, f, strings.TrimSuffix(f, "s"))
			}
		}
		for _, f := range []string{"name", "policy", "key"} {
			if v := rf[f]; v != nil && deref(v).Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: %s: %s: want a single value", v.Line, where, f)
			}
			if err := text(rf[f], where+": "+f); err != nil {
				return err
			}
		}
	}
	return nil
}

// deref follows an alias (*name) to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// mapped is a mapping checked against one set of known fields, for mapping's done. A mapping's
// fields depend only on those (an error anywhere ends the whole check), so a map merged by every
// rule of a file is read once, not once per rule.
type mapped struct {
	n     *yaml.Node
	known *string
}

// mapping returns n's fields by name, refusing a field not in known (naming the line, where and
// the field) and a node that is not a mapping. The fields of a merge key's mappings (<<: *base,
// or <<: [*a, *b]) are n's too, as yaml decodes them: n's own fields win, then the first mapping
// that has the field. done holds the mappings already read, with the known fields they were read
// against, so that each is read once however often it is merged, and one that merges itself is
// refused.
func mapping(n *yaml.Node, where string, known []string, done map[mapped]map[string]*yaml.Node) (map[string]*yaml.Node, error) {
	m := deref(n)
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: %s: want a map with %s", n.Line, where, strings.Join(known, ", "))
	}
	key := mapped{m, &known[0]}
	if fields, ok := done[key]; ok {
		if fields == nil {
			return nil, fmt.Errorf("line %d: %s: <<: merges a map into itself", n.Line, where)
		}
		return fields, nil
	}
	done[key] = nil
	fields := map[string]*yaml.Node{}
	var merged []*yaml.Node
	sawMerge := false
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := deref(m.Content[i]), m.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" && k.Value == "<<" {
			if sawMerge {
				return nil, fmt.Errorf("line %d: %s: <<: given twice (merge several maps with <<: [*a, *b])", k.Line, where)
			}
			sawMerge = true
			if v.Kind == yaml.SequenceNode { // <<: [*a, *b]; yaml refuses an alias to a list here
				merged = append(merged, v.Content...)
			} else {
				merged = append(merged, v)
			}
			continue
		}
		if !contains(known, k.Value) {
			return nil, fmt.Errorf("line %d: %s: unknown field %q (want %s)", k.Line, where, k.Value, strings.Join(known, ", "))
		}
		if fields[k.Value] != nil {
			return nil, fmt.Errorf("line %d: %s: field %q given twice", k.Line, where, k.Value)
		}
		fields[k.Value] = v
	}
	for _, mn := range merged {
		if deref(mn).Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: %s: <<: want a map, or a list of maps, to merge", mn.Line, where)
		}
		mf, err := mapping(mn, where, known, done)
		if err != nil {
			return nil, err
		}
		for f, v := range mf {
			if fields[f] == nil {
				fields[f] = v
			}
		}
	}
	done[key] = fields
	return fields, nil
}

// listExamples are what each list field looks like, for its errors.
var listExamples = map[string]string{"paths": "[/healthz, /ready]", "cidrs": "[10.0.0.0/8]", "methods": "[GET, POST]", "rates": "[10/1s, 1000/1h]"}

// list refuses a field that is neither absent nor a list of single values.
func list(n *yaml.Node, where, example string) error {
	if n == nil || deref(n).Tag == "!!null" {
		return nil
	}
	if deref(n).Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: %s: want a list, like %s", n.Line, where, example)
	}
	for _, v := range deref(n).Content {
		if deref(v).Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: %s: want a list of single values", v.Line, where)
		}
		if deref(v).Tag == "!!null" {
			// yaml drops it, and a list left empty would match everything.
			return fmt.Errorf("line %d: %s: an empty item (~ or null); remove it or give a value", v.Line, where)
		}
		if err := text(v, where); err != nil {
			return err
		}
	}
	return nil
}

// text refuses a single value that does not decode as text (a tag such as !!float on a value
// that is not one), naming the line and where, which yaml's own error does not.
func text(n *yaml.Node, where string) error {
	if n == nil || deref(n).Tag == "!!null" {
		return nil
	}
	var s string
	if err := deref(n).Decode(&s); err != nil {
		return fmt.Errorf("line %d: %s: %q is not a value this field takes (%s)", n.Line, where, deref(n).Value, yamlError(err))
	}
	return nil
}
