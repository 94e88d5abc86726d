package rls

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/policy"
	"go.yaml.in/yaml/v3"
)

// Config is a loaded, validated set of domains, each from one YAML file. It is immutable once
// returned, so one Config may be shared by any number of goroutines and servers.
type Config struct {
	domains map[string]*domain
	files   []string
	source  string   // the path given to LoadConfig
	fp      [32]byte // the fingerprint of source taken before it was read
}

// Domains returns the configured domain names, sorted. Safe for concurrent use, as c is immutable;
// each call returns a new slice, the caller's own.
func (c *Config) Domains() []string {
	names := make([]string, 0, len(c.domains))
	for name := range c.domains {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Files returns the files the config was read from, in the order they were read. Safe for
// concurrent use, as c is immutable; each call returns a new slice, the caller's own.
func (c *Config) Files() []string { return append([]string(nil), c.files...) }

// domain is one file's tree of descriptors.
type domain struct {
	name string
	file string
	root *node
}

// node is one descriptor of the config: the children are looked up by the next request entry,
// by exact value first, then by the longest matching value prefix (a value ending in '*'), then
// by key alone (the default for any value).
type node struct {
	exact    map[entryKey]*node
	prefixes []*node // values ending in '*', longest prefix first
	byKey    map[string]*node

	key, value string // value "" for a default; for a prefix, value without its '*'
	prefix     bool
	path       string // key_value.key_value…, the name in metrics and in logs
	limit      *rateLimit
	shadow     bool
	detailed   bool
	line       int
}

type entryKey struct{ key, value string }

// rateLimit is one descriptor's rate_limit: what the status reports (name, requests_per_unit,
// unit and multiplier) and what the limiter applies (pol).
type rateLimit struct {
	name       string
	replaces   []string
	unlimited  bool
	perUnit    int64 // requests per window; 0 refuses every request
	unit       unit  // the reported unit; unitUnknown for a window that is no whole unit
	multiplier uint32
	window     time.Duration
	policyID   string
	pol        policy.Policy // nil when unlimited or perUnit == 0
}

// unit is the proto's RateLimitResponse.RateLimit.Unit numbering, kept here so that the config
// needs no import of the generated code.
type unit int32

const (
	unitUnknown unit = 0
	unitSecond  unit = 1
	unitMinute  unit = 2
	unitHour    unit = 3
	unitDay     unit = 4
	unitMonth   unit = 5
	unitYear    unit = 6
	unitWeek    unit = 7
)

// units are the names a config may give, with their lengths. A month is 30 days and a year 365,
// as in envoyproxy/ratelimit; a year exceeds the longest window the policies accept.
var units = []struct {
	name string
	unit unit
	d    time.Duration
}{
	{"second", unitSecond, time.Second},
	{"minute", unitMinute, time.Minute},
	{"hour", unitHour, time.Hour},
	{"day", unitDay, 24 * time.Hour},
	{"week", unitWeek, 7 * 24 * time.Hour},
	{"month", unitMonth, 30 * 24 * time.Hour},
	{"year", unitYear, 365 * 24 * time.Hour},
}

// policies are the values the policy field takes. Sliding log and dual bucket are left out: they
// cannot give units back, which all-or-nothing across descriptors needs.
var policies = []string{"sliding-counter", "fixed-window", "token-bucket", "gcra", "leaky-bucket"}

// ConfigError is a configuration that cannot be loaded: the file, the line (0 when the error is
// about the file as a whole) and the reason. It is a plain value, safe to share between goroutines.
type ConfigError struct {
	// File is the configuration file's path, as given.
	File string
	// Line is the 1-based line the error is about, or 0 for the file as a whole.
	Line int
	// Reason says what is wrong and, where it can, what to write instead.
	Reason string
}

// Error returns "FILE: line N: REASON", or "FILE: REASON" when Line is 0. A pure function of e:
// safe for concurrent use.
func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s: line %d: %s", e.File, e.Line, e.Reason)
	}
	return e.File + ": " + e.Reason
}

// LoadConfig reads path, a YAML file or a directory of them (*.yaml and *.yml, not recursive;
// names starting with '.' are skipped, symbolic links followed), one domain per file, in
// envoyproxy/ratelimit's format with two extensions, window and policy (see docs/rls.md), each
// file at most 16 MiB. Any problem is a *ConfigError naming the file and the reason. Safe to call
// from any goroutine.
func LoadConfig(path string) (*Config, error) {
	// Taken before the files are read: a change made while they are read shows up as a
	// difference at Watch's next poll, rather than being missed.
	fp := fingerprint(path)
	files, err := configFiles(path)
	if err != nil {
		return nil, err
	}
	cfg := &Config{domains: map[string]*domain{}, files: files, source: path, fp: fp}
	for _, f := range files {
		data, err := readConfigFile(f)
		if err != nil {
			return nil, &ConfigError{File: f, Reason: errReason(err)}
		}
		d, err := parseDomain(f, data)
		if err != nil {
			return nil, err
		}
		if prev, ok := cfg.domains[d.name]; ok {
			return nil, &ConfigError{File: f, Reason: fmt.Sprintf("duplicate domain %q: already defined in %s", d.name, prev.file)}
		}
		cfg.domains[d.name] = d
	}
	return cfg, nil
}

// configFiles lists the files LoadConfig reads from path. Only regular files are read (symbolic
// links followed): reading a FIFO, a socket or a device would block, or never end.
func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &ConfigError{File: path, Reason: errReason(err)}
	}
	if !st.IsDir() {
		if !st.Mode().IsRegular() {
			return nil, &ConfigError{File: path, Reason: fmt.Sprintf("not a regular file or a directory (%v)", st.Mode().Type())}
		}
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, &ConfigError{File: path, Reason: errReason(err)}
	}
	var files []string
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		full := filepath.Join(path, name)
		fst, err := os.Stat(full)
		if err != nil {
			// A link that points nowhere, or a file removed since the listing: dropping it would
			// load the directory without its domains, and a reload would apply that.
			return nil, &ConfigError{File: full, Reason: errReason(err)}
		}
		if fst.IsDir() {
			continue
		}
		if !fst.Mode().IsRegular() {
			return nil, &ConfigError{File: full, Reason: fmt.Sprintf("not a regular file (%v)", fst.Mode().Type())}
		}
		files = append(files, full)
	}
	if len(files) == 0 {
		return nil, &ConfigError{File: path, Reason: "directory holds no .yaml or .yml file"}
	}
	return files, nil
}

// ParseConfig is LoadConfig for one file's contents; name stands for the file in errors. Safe to
// call from any goroutine.
func ParseConfig(name string, data []byte) (*Config, error) {
	if len(data) > maxConfigBytes {
		return nil, &ConfigError{File: name, Reason: errTooLarge.Error()}
	}
	d, err := parseDomain(name, data)
	if err != nil {
		return nil, err
	}
	return &Config{domains: map[string]*domain{d.name: d}, files: []string{name}}, nil
}

// maxConfigBytes bounds one config file, for LoadConfig and ParseConfig alike. A file of this size
// holds about 200,000 descriptors; a path that names a log or a database dump by mistake is refused
// at once instead of being parsed for a minute into gigabytes of nodes.
const maxConfigBytes = 16 << 20

// errTooLarge is the reason given for a file past maxConfigBytes.
var errTooLarge = fmt.Errorf("larger than %d MiB, which no config is", maxConfigBytes>>20)

// readConfigFile reads at most maxConfigBytes+1 of f, whatever it grows to meanwhile.
func readConfigFile(f string) ([]byte, error) {
	fh, err := os.Open(f)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigBytes {
		return nil, errTooLarge
	}
	return data, nil
}

func errReason(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// parser walks the YAML node tree by hand rather than decoding into structs: that is how every
// error gets its line, and how a misspelled field, a duplicate field or a key that is not a
// string is caught instead of ignored.
type parser struct {
	file  string
	paths map[string]int // every descriptor's path in the domain, and its line
}

func (p *parser) errf(n *yaml.Node, format string, a ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ConfigError{File: p.file, Line: line, Reason: fmt.Sprintf(format, a...)}
}

func parseDomain(file string, data []byte) (*domain, error) {
	p := &parser{file: file, paths: map[string]int{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{File: file, Reason: "bad YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &ConfigError{File: file, Reason: "empty file: want a map with domain and descriptors"}
	}
	root, err := expand(p, doc.Content[0])
	if err != nil {
		return nil, err
	}
	fields, err := p.fields(root, "the file", "domain", "descriptors")
	if err != nil {
		return nil, err
	}
	d := &domain{file: file, root: &node{}}
	if v := fields["domain"]; v != nil {
		if d.name, err = p.str(v, "domain"); err != nil {
			return nil, err
		}
	}
	if d.name == "" {
		return nil, p.errf(root, "domain is empty or missing")
	}
	if err := p.children(d.root, fields["descriptors"], ""); err != nil {
		return nil, err
	}
	return d, nil
}

// fields checks that n is a map whose keys are distinct strings among allowed, and returns the
// values by key.
func (p *parser) fields(n *yaml.Node, what string, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, "%s is %s, want a map", what, kindName(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return nil, p.errf(k, "field name %s in %s is not a string", describe(k), what)
		}
		known := false
		for _, a := range allowed {
			known = known || a == k.Value
		}
		if !known {
			if why, ok := unsupported[k.Value]; ok {
				// false turns the feature off, as it is here: a file that writes every field
				// (a template, a generator) loads on envoyproxy/ratelimit and must load here.
				if off, err := p.boolean(v, k.Value); err == nil && !off {
					continue
				}
				return nil, p.errf(k, "field %q in %s is not supported: %s", k.Value, what, why)
			}
			return nil, p.errf(k, "unknown field %q in %s (want %s)", k.Value, what, strings.Join(allowed, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errf(k, "duplicate field %q in %s", k.Value, what)
		}
		out[k.Value] = v
	}
	return out, nil
}

// unsupported are envoyproxy/ratelimit fields this service rejects rather than ignores, since
// ignoring them would change decisions silently; each is accepted when false, which asks for
// nothing.
var unsupported = map[string]string{
	"quota_mode":      "quota mode is not implemented",
	"share_threshold": "shared wildcard thresholds are not implemented",
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("the %s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	}
	return "empty"
}

func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return fmt.Sprintf("%q (%s)", n.Value, strings.TrimPrefix(n.Tag, "!!"))
	}
	return kindName(n)
}

func isNull(n *yaml.Node) bool { return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// str reads a string field. Any scalar but null is accepted as its text, as a YAML value such as
// 123 or true is meant as the string a descriptor carries.
func (p *parser) str(n *yaml.Node, field string) (string, error) {
	if isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", p.errf(n, "%s is %s, want a string", field, kindName(n))
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, field string) (bool, error) {
	if isNull(n) {
		return false, nil
	}
	var b bool
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 {
		// envoyproxy/ratelimit's YAML library reads YAML 1.1, whose booleans include yes, on
		// and their kin; a file written for it must load here alike. Quoted, they are strings
		// there too.
		if v, ok := yaml11Bools[n.Value]; ok {
			return v, nil
		}
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		return false, p.errf(n, "%s is %s, want true or false", field, kindName(n))
	}
	return b, nil
}

// yaml11Bools are YAML 1.1's plain booleans that YAML 1.2 reads as strings.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

func (p *parser) children(parent *node, list *yaml.Node, parentPath string) error {
	if isNull(list) {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		return p.errf(list, "descriptors is %s, want a list of maps", kindName(list))
	}
	parent.exact, parent.byKey = map[entryKey]*node{}, map[string]*node{}
	seen, siblings := map[entryKey]int{}, map[string]bool{}
	for i, item := range list.Content {
		what := fmt.Sprintf("descriptor %d under %s", i+1, orTop(parentPath))
		if item.Kind != yaml.MappingNode {
			return p.errf(item, "%s is %s, want a map with key, value, rate_limit, descriptors", what, kindName(item))
		}
		f, err := p.fields(item, what, "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric", "metadata")
		if err != nil {
			return err
		}
		n := &node{line: item.Line}
		if n.key, err = p.str(f["key"], "key"); err != nil {
			return err
		}
		if n.key == "" {
			return p.errf(item, "%s: key is empty or missing", what)
		}
		if strings.Contains(n.key, "*") {
			// envoyproxy/ratelimit reads a * in a key as a pattern over the request's key_value;
			// taken as a literal, its limit would apply to no request, silently.
			return p.errf(item, "%s: key %q has a *: envoyproxy/ratelimit reads it as a pattern over key_value, which is not supported (a value ending in * is)", what, n.key)
		}
		if n.value, err = p.str(f["value"], "value"); err != nil {
			return err
		}
		ek := entryKey{n.key, n.value}
		if prev, dup := seen[ek]; dup {
			return p.errf(item, "duplicate descriptor %s under %s (first at line %d)", segment(n.key, n.value), orTop(parentPath), prev)
		}
		seen[ek] = item.Line
		if md := f["metadata"]; !isNull(md) && md.Kind != yaml.MappingNode {
			return p.errf(md, "metadata in %s is %s, want a map", what, kindName(md))
		}
		n.path = segment(n.key, n.value)
		if parentPath != "" {
			n.path = parentPath + "." + n.path
		}
		// Two descriptors with one path are one name in metrics, headers and Redis keys: a
		// sibling's key k_v and key k with value v (which envoyproxy/ratelimit refuses as one
		// descriptor given twice), or a key or value holding a '.' that spells the path of a
		// nested descriptor (key a.b at the top, and b under a).
		if prev, dup := p.paths[n.path]; dup {
			if siblings[n.path] {
				return p.errf(item, "descriptor %s under %s has the name of the one at line %d (a key and value are named key_value)", segment(n.key, n.value), orTop(parentPath), prev)
			}
			return p.errf(item, "descriptor %s under %s has the path %s of the one at line %d (a '.' in a key or value reads as a level)", segment(n.key, n.value), orTop(parentPath), n.path, prev)
		}
		p.paths[n.path], siblings[n.path] = item.Line, true
		if n.shadow, err = p.boolean(f["shadow_mode"], "shadow_mode"); err != nil {
			return err
		}
		if n.detailed, err = p.boolean(f["detailed_metric"], "detailed_metric"); err != nil {
			return err
		}
		if _, err = p.boolean(f["value_to_metric"], "value_to_metric"); err != nil {
			return err
		}
		if rl := f["rate_limit"]; !isNull(rl) {
			if n.limit, err = p.rateLimit(rl, n.path); err != nil {
				return err
			}
		}
		if err := p.children(n, f["descriptors"], n.path); err != nil {
			return err
		}
		switch {
		case n.value == "":
			parent.byKey[n.key] = n
		case strings.Contains(strings.TrimSuffix(n.value, "*"), "*"):
			// envoyproxy/ratelimit reads such a value as a pattern; taken as an exact value or as a
			// prefix holding a literal *, its limit would never apply, so it is refused rather than
			// loaded in silence.
			return p.errf(item, "%s: value %q has a * before its end: only a value ending in * (a prefix) is supported", what, n.value)
		case strings.HasSuffix(n.value, "*"):
			n.prefix, n.value = true, strings.TrimSuffix(n.value, "*")
			parent.prefixes = append(parent.prefixes, n)
		default:
			parent.exact[ek] = n
		}
	}
	sort.SliceStable(parent.prefixes, func(i, j int) bool { return len(parent.prefixes[i].value) > len(parent.prefixes[j].value) })
	return nil
}

func orTop(path string) string {
	if path == "" {
		return "the domain"
	}
	return path
}

// segment names one descriptor as envoyproxy/ratelimit does in its stats: key, or key_value.
func segment(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

func (p *parser) rateLimit(n *yaml.Node, path string) (*rateLimit, error) {
	what := "rate_limit of " + path
	f, err := p.fields(n, what, "unit", "requests_per_unit", "unlimited", "name", "replaces", "window", "policy")
	if err != nil {
		return nil, err
	}
	rl := &rateLimit{}
	if rl.name, err = p.str(f["name"], "name"); err != nil {
		return nil, err
	}
	if rl.unlimited, err = p.boolean(f["unlimited"], "unlimited"); err != nil {
		return nil, err
	}
	if r := f["replaces"]; !isNull(r) {
		if r.Kind != yaml.SequenceNode {
			return nil, p.errf(r, "replaces in %s is %s, want a list of maps with a name", what, kindName(r))
		}
		for i, item := range r.Content {
			rf, err := p.fields(item, fmt.Sprintf("replaces entry %d of %s", i+1, path), "name")
			if err != nil {
				return nil, err
			}
			name, err := p.str(rf["name"], "name")
			if err != nil {
				return nil, err
			}
			if name == "" {
				return nil, p.errf(item, "replaces entry %d of %s has no name", i+1, path)
			}
			if name == rl.name {
				return nil, p.errf(item, "%s replaces %q, its own name", what, name)
			}
			rl.replaces = append(rl.replaces, name)
		}
	}
	unitName, err := p.str(f["unit"], "unit")
	if err != nil {
		return nil, err
	}
	windowText, err := p.str(f["window"], "window")
	if err != nil {
		return nil, err
	}
	rl.policyID, err = p.str(f["policy"], "policy")
	if err != nil {
		return nil, err
	}
	rpuNode := f["requests_per_unit"]
	if rl.unlimited {
		// envoyproxy/ratelimit refuses a unit beside unlimited and ignores requests_per_unit, so
		// files written for it may hold one: ignored here too. window and policy are this
		// service's own, with no such files to load.
		for _, field := range []string{"unit", "window", "policy"} {
			// An empty unit, or envoyproxy/ratelimit's UNKNOWN, sets none: it loads them beside
			// unlimited.
			if field == "unit" && (unitName == "" || strings.EqualFold(unitName, "unknown")) {
				continue
			}
			if !isNull(f[field]) {
				return nil, p.errf(f[field], "%s is unlimited and also sets %s", what, field)
			}
		}
		return rl, nil
	}
	if isNull(rpuNode) {
		return nil, p.errf(n, "%s has no requests_per_unit", what)
	}
	outOfRange := func() (*rateLimit, error) {
		return nil, p.errf(rpuNode, "requests_per_unit %s in %s is out of range [0, %d]", rpuNode.Value, what, int64(policy.MaxLimit))
	}
	switch {
	case rpuNode.Kind == yaml.ScalarNode && rpuNode.Tag == "!!float":
		// envoyproxy/ratelimit refuses a float anywhere in its files ("error checking config");
		// here a whole one is read as the number it is (10.0 and 1e3 are 10 and 1000), and one
		// with a fraction is refused, as a limit of 10.5 is no whole number of requests. YAML
		// reads some whole numbers as floats too: one too large for 64 bits, and one with a
		// leading zero that is not octal (08, read as 8).
		var f float64
		if rpuNode.Decode(&f) != nil || math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) {
			return nil, p.errf(rpuNode, "requests_per_unit %s in %s is not a whole number", rpuNode.Value, what)
		}
		if f < 0 || f > float64(policy.MaxLimit) {
			return outOfRange()
		}
		rl.perUnit = int64(f)
	case rpuNode.Kind != yaml.ScalarNode || rpuNode.Tag != "!!int":
		return nil, p.errf(rpuNode, "requests_per_unit in %s is %s, want a whole number", what, kindName(rpuNode))
	default:
		// Decoded as YAML reads a whole number (1_000 and 1__000 are 1000, as envoyproxy/ratelimit's
		// YAML reads them too), not as Go does: only a number past 64 bits fails here.
		if rpuNode.Decode(&rl.perUnit) != nil || rl.perUnit < 0 || rl.perUnit > policy.MaxLimit {
			return outOfRange()
		}
	}
	switch {
	case unitName != "" && windowText != "":
		return nil, p.errf(f["window"], "%s sets both unit and window: give one", what)
	case unitName == "" && windowText == "":
		return nil, p.errf(n, "%s has no unit (second, minute, hour, day, week, month) or window", what)
	case unitName != "":
		found := false
		for _, u := range units {
			if strings.EqualFold(u.name, unitName) {
				rl.unit, rl.multiplier, rl.window, found = u.unit, 1, u.d, true
			}
		}
		if !found {
			return nil, p.errf(f["unit"], "unknown unit %q in %s (want second, minute, hour, day, week or month)", unitName, what)
		}
		if rl.window > policy.MaxWindow {
			return nil, p.errf(f["unit"], "unit %q in %s is not supported: its window, %v, is past the longest the policies accept, %v (use day, week or month, or a window)", unitName, what, rl.window, policy.MaxWindow)
		}
	default:
		w, err := time.ParseDuration(windowText)
		if err != nil {
			return nil, p.errf(f["window"], "window %q in %s: not a duration (such as 10s, 1m30s, 250ms)", windowText, what)
		}
		rl.window = w
		rl.unit, rl.multiplier = unitOf(w)
	}
	if rl.window < time.Millisecond || rl.window%time.Millisecond != 0 || rl.window > policy.MaxWindow {
		node := f["window"]
		if node == nil {
			node = f["unit"]
		}
		return nil, p.errf(node, "the window of %s (%v) must be a whole number of milliseconds in [1ms, %v]", what, rl.window, policy.MaxWindow)
	}
	if rl.policyID == "" {
		rl.policyID = "sliding-counter"
	}
	// requests_per_unit 0 refuses everything and builds no limiter: only the policy's name is
	// checked, with a rate every policy accepts (a bucket's refill must be whole per second).
	perUnit, window := rl.perUnit, rl.window
	if perUnit == 0 {
		perUnit, window = 1, time.Second
	}
	pol, err := buildPolicy(rl.policyID, perUnit, window)
	if err != nil {
		return nil, p.errf(f["policy"], "%s: %v", what, err)
	}
	if rl.perUnit > 0 {
		rl.pol = pol
	}
	return rl, nil
}

// unitOf reports w as a whole number of the largest unit that divides it, for the status's
// current_limit; a window below a second, or one that is no whole number of seconds, is UNKNOWN.
func unitOf(w time.Duration) (unit, uint32) {
	for i := len(units) - 1; i >= 0; i-- {
		u := units[i]
		if u.unit == unitYear || u.unit == unitMonth {
			continue // 30-day months are an approximation; do not report windows in them
		}
		if w >= u.d && w%u.d == 0 && w/u.d <= 1<<32-1 {
			return u.unit, uint32(w / u.d)
		}
	}
	return unitUnknown, 0
}

// buildPolicy makes the policy that admits limit units per window: the window policies directly;
// the buckets hold limit units and refill them over one window, which must come to a whole number
// of units per second.
func buildPolicy(id string, limit int64, window time.Duration) (policy.Policy, error) {
	var p policy.Policy
	switch id {
	case "sliding-counter":
		p = policy.SlidingCounter{Limit: limit, Window: window}
	case "fixed-window":
		p = policy.FixedWindow{Limit: limit, Window: window}
	case "token-bucket", "gcra", "leaky-bucket":
		ms := window.Milliseconds()
		if limit*1000%ms != 0 {
			return nil, fmt.Errorf("policy %s refills requests_per_unit over the window, which must come to a whole number per second: %d per %v is not", id, limit, window)
		}
		rate := limit * 1000 / ms
		switch id {
		case "token-bucket":
			p = policy.TokenBucket{Rate: rate, Burst: limit}
		case "gcra":
			p = policy.GCRA{Rate: rate, Burst: limit}
		default:
			p = policy.LeakyBucket{Rate: rate, Capacity: limit}
		}
	case "sliding-log", "dual-bucket":
		return nil, fmt.Errorf("policy %q cannot give units back, which all-or-nothing across descriptors needs (want one of %s)", id, strings.Join(policies, ", "))
	default:
		return nil, fmt.Errorf("unknown policy %q (want one of %s)", id, strings.Join(policies, ", "))
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// match returns the most specific descriptor for entries, or nil when none matches all of them:
// at each depth an exact value wins over the longest value prefix, which wins over the key alone.
// As in envoyproxy/ratelimit, a request with more entries than the config has levels matches
// nothing.
func (d *domain) match(entries []entry) *node {
	n := d.root
	for _, e := range entries {
		next := n.exact[entryKey(e)]
		if next == nil {
			for _, pn := range n.prefixes {
				if pn.key == e.key && strings.HasPrefix(e.value, pn.value) {
					next = pn
					break
				}
			}
		}
		if next == nil {
			next = n.byKey[e.key]
		}
		if next == nil {
			return nil
		}
		n = next
	}
	if n == d.root {
		return nil
	}
	return n
}

// entry is one key and value of a request's descriptor.
type entry struct{ key, value string }
