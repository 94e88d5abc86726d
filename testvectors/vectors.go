// Package testvectors reads, writes and runs vector files in the policy registry's format
// (docs/testing.md, "Conformance vectors"): per policy, a list of cases, each a fresh limiter with integer
// parameters and a list of calls with their expected results.
//
// Load and Parse check a file completely before anything runs, and name the case and step of
// the first problem. Run replays every case through the real engine with a manual clock;
// RunReference replays it through the independent reference model (internal/reference), which
// is what produced the expectations of the files under testvectors/data.
//
// The functions of this package keep no shared state: they are safe for concurrent use as long
// as no two goroutines modify one *File at the same time (running a File only reads it).
package testvectors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/slidelimit/slidelimit/internal/reference"
)

// PolicyPrefix starts every policy name in a vector file: "rate-limiter/sliding-counter".
const PolicyPrefix = "rate-limiter/"

// Version is the only file format version this package reads and writes.
const Version = 1

// Calls other than the probes, as the files spell them.
const (
	CallAllow      = "allow"
	CallRetryAfter = "retryAfter"
	CallStateSize  = "stateSize"
)

// MaxNow is the largest time (ms) a step may carry: 2^62-1, the engine's clock.MaxMs and the end
// of the reference model's range (2^62 ms is about 146 million years). A later time could not be
// stored in the engine's cells, whose flag bits sit above bit 61.
const MaxNow = 1<<62 - 1

// arity is each call's number of arguments; allow returns a bool, every other call an integer.
var arity = map[string]int{
	CallAllow:                3, // key, cost, now
	CallRetryAfter:           2, // key, now
	CallStateSize:            0,
	reference.CallEstimateOf: 2,
	reference.CallCountOf:    2,
	reference.CallTokensOf:   2,
	reference.CallLevelOf:    2,
	reference.CallRequestsOf: 2,
}

// File is one vector file. A File read by Load or Parse has been checked completely; one built
// in memory is checked again by Run, RunReference and Encode. It is plain data: any number of
// goroutines may read or run one File at once, as long as none modifies it meanwhile.
type File struct {
	// Path is where the file was read from ("" when built in memory); it names the file in
	// failure lines and errors. It is not part of the JSON.
	Path string
	// Policy is the registry's policy name, PolicyPrefix + id.
	Policy string
	// Version is the format version, always 1.
	Version int
	// Cases are the file's cases, each run on a fresh limiter, in order.
	Cases []Case
}

// Case is one fresh limiter and the calls made on it, in order. Plain data, like File: any number
// of goroutines may read one at once, as long as none modifies it meanwhile.
type Case struct {
	// Name says what the case pins; names are unique within a file.
	Name string
	// Params are the policy's integer parameters (limit and windowMs, ratePerSec and burst, …).
	Params map[string]int64
	// Seed is the seed of the random walk that produced the calls, or 1 for hand-written cases
	// (kept for the registry's format; running a case never uses it).
	Seed int64
	// Steps are the calls, made in order on the case's one limiter.
	Steps []Step
}

// Step is one call with its integer arguments and expected result. Plain data, like File: any
// number of goroutines may read one at once, as long as none modifies it meanwhile.
type Step struct {
	// Call is allow, retryAfter, stateSize or one of the policy's probes (estimateOf, countOf,
	// tokensOf, levelOf, requestsOf).
	Call string
	// Args are (key, cost, now) for allow, (key, now) for retryAfter and the probes, and none for
	// stateSize.
	Args []int64
	// Expect is the call's result under the policy's rules.
	Expect Value
}

// Value is an expected or observed result: a bool (allow) or an integer (every other call).
// Values are comparable with ==, and safe to copy and to share between goroutines.
type Value struct {
	// IsBool says which of the two fields holds the value.
	IsBool bool
	// Bool is the value of a bool result (allow).
	Bool bool
	// Int is the value of an integer result (every other call).
	Int int64
}

// Bool returns the Value of a bool. A pure function, as every function here is: safe to call from
// any goroutine.
func Bool(b bool) Value { return Value{IsBool: true, Bool: b} }

// Int returns the Value of an integer. A pure function, safe to call from any goroutine.
func Int(i int64) Value { return Value{Int: i} }

// String returns the value as JSON writes it: true, false or a decimal integer. A pure function of
// v: safe for concurrent use.
func (v Value) String() string {
	if v.IsBool {
		return strconv.FormatBool(v.Bool)
	}
	return strconv.FormatInt(v.Int, 10)
}

// ID returns the policy id without PolicyPrefix ("sliding-counter"). It only reads f: safe for
// concurrent use while no goroutine modifies f.
func (f *File) ID() string { return strings.TrimPrefix(f.Policy, PolicyPrefix) }

// String returns the call with its arguments as the failure lines print it: allow(1, 2, 3). It only
// reads s: safe for concurrent use while no goroutine modifies s.Args.
func (s Step) String() string {
	parts := make([]string, len(s.Args))
	for i, a := range s.Args {
		parts[i] = strconv.FormatInt(a, 10)
	}
	return s.Call + "(" + strings.Join(parts, ", ") + ")"
}

// Load reads and checks the vector file at path; it shares nothing between calls, so concurrent
// Loads are safe. The error names the file and, where the problem
// is inside a case, the case (index and name) and the step (index counting from 0).
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// The raw shapes are decoded layer by layer so that a type error deep inside can still name its
// case and step, which encoding/json's own errors cannot.
type rawFile struct {
	Policy  *string           `json:"policy"`
	Version *int              `json:"version"`
	Cases   []json.RawMessage `json:"cases"`
}

type rawCase struct {
	Name   string                     `json:"name"`
	Params map[string]json.RawMessage `json:"params"`
	Seed   json.RawMessage            `json:"seed"`
	Steps  []json.RawMessage          `json:"steps"`
}

type rawStep struct {
	Call   *string           `json:"call"`
	Args   []json.RawMessage `json:"args"`
	Expect json.RawMessage   `json:"expect"`
}

// Parse checks data as a vector file; name stands for the file in errors (and becomes File.Path).
// It only reads data, and is safe for concurrent use.
func Parse(name string, data []byte) (*File, error) {
	var rf rawFile
	if err := json.Unmarshal(data, &rf); err != nil {
		return nil, fmt.Errorf("%s: %s", name, describeJSONError(data, err, ""))
	}
	if rf.Version != nil && *rf.Version != Version {
		// Before the fields: a later version may have fields this one does not know, and its
		// number is what the reader can act on.
		return nil, fmt.Errorf("%s: version %d, want %d", name, *rf.Version, Version)
	}
	if err := knownFields(data, "policy", "version", "cases"); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if rf.Policy == nil {
		return nil, fmt.Errorf("%s: missing \"policy\"", name)
	}
	if rf.Version == nil {
		return nil, fmt.Errorf("%s: missing \"version\"", name)
	}
	if rf.Cases == nil {
		return nil, fmt.Errorf("%s: missing \"cases\"", name)
	}
	f := &File{Path: name, Policy: *rf.Policy, Version: *rf.Version, Cases: make([]Case, len(rf.Cases))}
	for ci, raw := range rf.Cases {
		c, err := parseCase(raw)
		if err != nil {
			where := fmt.Sprintf("case %d", ci)
			if c.Name != "" {
				where += fmt.Sprintf(" %q", c.Name)
			}
			return nil, fmt.Errorf("%s: %s: %w", name, where, err)
		}
		f.Cases[ci] = c
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	return f, nil
}

// parseCase decodes one case; on error it still returns what it learnt of the name.
func parseCase(raw json.RawMessage) (Case, error) {
	var rc rawCase
	if err := json.Unmarshal(raw, &rc); err != nil {
		return Case{}, errors.New(describeJSONError(raw, err, " of the case"))
	}
	c := Case{Name: rc.Name, Seed: 1, Params: make(map[string]int64, len(rc.Params)), Steps: make([]Step, len(rc.Steps))}
	if err := knownFields(raw, "name", "params", "seed", "steps"); err != nil {
		return c, err
	}
	if rc.Params == nil {
		return c, errors.New("missing \"params\"")
	}
	var params struct{ Params json.RawMessage }
	if json.Unmarshal(raw, &params) == nil {
		if k, ok := repeatedKey(params.Params); ok {
			return c, fmt.Errorf("param %q given twice", k)
		}
	}
	if rc.Steps == nil {
		return c, errors.New("missing \"steps\"")
	}
	for k, v := range rc.Params {
		n, err := parseInt(v)
		if err != nil {
			return c, fmt.Errorf("param %s: %w", k, err)
		}
		c.Params[k] = n
	}
	if rc.Seed != nil {
		n, err := parseInt(rc.Seed)
		if err != nil {
			return c, fmt.Errorf("seed: %w", err)
		}
		c.Seed = n
	}
	for si, raw := range rc.Steps {
		s, err := parseStep(raw)
		if err != nil {
			return c, fmt.Errorf("step %d: %w", si, err)
		}
		c.Steps[si] = s
	}
	return c, nil
}

func parseStep(raw json.RawMessage) (Step, error) {
	var rs rawStep
	if err := json.Unmarshal(raw, &rs); err != nil {
		return Step{}, errors.New(describeJSONError(raw, err, " of the step"))
	}
	if err := knownFields(raw, "call", "args", "expect"); err != nil {
		return Step{}, err
	}
	if rs.Call == nil {
		return Step{}, errors.New("missing \"call\"")
	}
	s := Step{Call: *rs.Call, Args: make([]int64, len(rs.Args))}
	if _, known := arity[s.Call]; !known {
		return s, fmt.Errorf("unknown call %q", s.Call)
	}
	for i, a := range rs.Args {
		n, err := parseInt(a)
		if err != nil {
			return s, fmt.Errorf("%s: arg %d: %w", s.Call, i, err)
		}
		s.Args[i] = n
	}
	switch e := bytes.TrimSpace(rs.Expect); {
	case len(e) == 0:
		return s, fmt.Errorf("%s: missing \"expect\"", s.Call)
	case string(e) == "true" || string(e) == "false":
		s.Expect = Bool(string(e) == "true")
	default:
		n, err := parseInt(e)
		if err != nil && s.Call == CallAllow {
			return s, fmt.Errorf("%s: expect: %s is not true or false", s.Call, e)
		} else if err != nil {
			return s, fmt.Errorf("%s: expect: %w", s.Call, err)
		}
		s.Expect = Int(n)
	}
	return s, nil
}

// knownFields refuses an object with a field other than those named: a misspelt "expected"
// would otherwise be dropped without a word, and a step read as having no expectation. data has
// already been decoded as an object.
func knownFields(data []byte, names ...string) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil // the caller's own decoding reported it
	}
	if k, ok := repeatedKey(data); ok {
		return fmt.Errorf("field %q given twice", k)
	}
	var unknown []string
	for k := range fields {
		if !slices.Contains(names, k) {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown) // the same message for the same file
	noun := "field"
	if len(unknown) > 1 {
		noun = "fields"
	}
	return fmt.Errorf("unknown %s %s (want %s)", noun, strings.Join(unknown, ", "), strings.Join(names, ", "))
}

// repeatedKey returns the first key that the JSON object data gives twice. encoding/json keeps the
// last silently, so a file could mean other than what its reader sees ("expect": true, …,
// "expect": false).
func repeatedKey(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		k, _ := t.(string)
		if seen[k] {
			return k, true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

// parseInt accepts a JSON integer literal only: 1.0 and 1e3 are refused, since a vector's numbers
// are exact and a float would hide a rounding.
func parseInt(raw json.RawMessage) (int64, error) {
	text := string(bytes.TrimSpace(raw))
	n, err := strconv.ParseInt(text, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%s is out of the 64-bit integers' range [%d, %d]", text, int64(math.MinInt64), int64(math.MaxInt64))
	}
	if err != nil {
		return 0, fmt.Errorf("%s is not an integer", text)
	}
	return n, nil
}

// describeJSONError turns a decoding error into text with a line and column where it has an
// offset, counted from the start of data: the file, or (within says so) one case's or step's
// object, which the error's prefix names.
func describeJSONError(data []byte, err error, within string) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := position(data, syn.Offset)
		return fmt.Sprintf("bad JSON at line %d column %d%s: %v", line, col, within, syn)
	case errors.As(err, &typ):
		line, col := position(data, typ.Offset)
		field := typ.Field
		if field == "" {
			field = "value"
		}
		return fmt.Sprintf("bad JSON at line %d column %d%s: %s is a JSON %s, want %s", line, col, within, field, typ.Value, kindName(typ.Type))
	}
	return "bad JSON: " + err.Error()
}

// kindName says what JSON a Go type decodes from, without naming this package's private types.
func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		// A JSON number decodes into one only when it is written as an integer and fits: 1.0,
		// 1e0 and 2^64 are numbers, and still refused.
		return "an integer in " + t.Kind().String() + "'s range, written without a fraction or exponent"
	}
	return "a number"
}

func position(data []byte, offset int64) (line, col int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// Check reports the first problem of f: an unknown policy or version, a case without a name or
// with a duplicate one, a missing, unknown or out-of-range param, an unknown call or one the
// policy does not answer, a wrong number of arguments, a time outside [0, MaxNow] (2^62 and later
// cannot be stored) or before an earlier step's time in the same case, or an expected value of the
// wrong type. The error names the file, the case and the step. It only reads f: safe for concurrent
// use while no goroutine modifies f.
func (f *File) Check() error {
	name := f.Path
	if name == "" {
		name = "(vector file)"
	}
	if !strings.HasPrefix(f.Policy, PolicyPrefix) {
		return fmt.Errorf("%s: policy %q does not start with %q", name, f.Policy, PolicyPrefix)
	}
	id := f.ID()
	if reference.Params(id) == nil {
		return fmt.Errorf("%s: unknown policy id %q (known: %s)", name, id, strings.Join(reference.IDs(), ", "))
	}
	if f.Version != Version {
		return fmt.Errorf("%s: version %d, want %d", name, f.Version, Version)
	}
	seen := make(map[string]int, len(f.Cases))
	for ci, c := range f.Cases {
		where := fmt.Sprintf("%s: case %d %q", name, ci, c.Name)
		if c.Name == "" {
			return fmt.Errorf("%s: case %d: missing \"name\"", name, ci)
		}
		if prev, dup := seen[c.Name]; dup {
			return fmt.Errorf("%s: the same name as case %d", where, prev)
		}
		seen[c.Name] = ci
		// The reference model's constructor is the single statement of which params each policy
		// takes and their ranges.
		if _, err := reference.New(id, c.Params); err != nil {
			// The file's fault, whichever of the two runs it: not the reference model's.
			return fmt.Errorf("%s: %s", where, strings.TrimPrefix(err.Error(), "reference: "))
		}
		// The engine's clock never goes backwards for one key, and the reference model and the
		// engine would answer a backward step differently, so such a case pins nothing.
		last, lastStep := int64(0), -1
		for si, s := range c.Steps {
			if err := checkStep(id, s); err != nil {
				return fmt.Errorf("%s: step %d: %w", where, si, err)
			}
			if n := arity[s.Call]; n > 0 {
				now := s.Args[n-1]
				if lastStep >= 0 && now < last {
					return fmt.Errorf("%s: step %d: %s: now = %d is before step %d's now = %d; time within a case never goes backwards", where, si, s.Call, now, lastStep, last)
				}
				last, lastStep = now, si
			}
		}
	}
	return nil
}

func checkStep(id string, s Step) error {
	n, known := arity[s.Call]
	switch {
	case !known:
		return fmt.Errorf("unknown call %q", s.Call)
	case n == 2 && s.Call != CallRetryAfter && !slices.Contains(reference.Probes(id), s.Call):
		return fmt.Errorf("call %q is not defined for policy %s (its probes: %s)", s.Call, id, strings.Join(reference.Probes(id), ", "))
	case len(s.Args) != n:
		return fmt.Errorf("%s: %d args, want %d", s.Call, len(s.Args), n)
	case s.Expect.IsBool != (s.Call == CallAllow):
		want := "an integer"
		if s.Call == CallAllow {
			want = "a bool"
		}
		return fmt.Errorf("%s: expect %s, want %s", s.Call, s.Expect, want)
	}
	if n > 0 {
		if now := s.Args[n-1]; now < 0 || now > MaxNow {
			return fmt.Errorf("%s: now = %d out of range [0, %d]", s.Call, now, int64(MaxNow))
		}
	}
	return nil
}

// Encode checks f and writes it as JSON (only reading f, so it may run beside other readers), one step per line, params in the policy's order, so that
// generated files are byte-for-byte reproducible and review well as diffs. It calls w.Write once,
// so concurrent calls that share a w need one that is safe for concurrent use.
func Encode(w io.Writer, f *File) error {
	if err := f.Check(); err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\n  \"policy\": %s,\n  \"version\": %d,\n  \"cases\": [", quote(f.Policy), f.Version)
	for ci, c := range f.Cases {
		if ci > 0 {
			b.WriteByte(',')
		}
		// Check has made sure the params are exactly the policy's, so its order covers them all.
		params := make([]string, 0, len(c.Params))
		for _, name := range reference.Params(f.ID()) {
			params = append(params, fmt.Sprintf("%s: %d", quote(name), c.Params[name]))
		}
		fmt.Fprintf(&b, "\n    {\n      \"name\": %s,\n      \"params\": {%s},\n      \"seed\": %d,\n      \"steps\": [",
			quote(c.Name), strings.Join(params, ", "), c.Seed)
		for si, s := range c.Steps {
			if si > 0 {
				b.WriteByte(',')
			}
			args := make([]string, len(s.Args))
			for i, a := range s.Args {
				args[i] = strconv.FormatInt(a, 10)
			}
			fmt.Fprintf(&b, "\n        {\"call\": %s, \"args\": [%s], \"expect\": %s}", quote(s.Call), strings.Join(args, ", "), s.Expect)
		}
		b.WriteString("\n      ]\n    }")
	}
	b.WriteString("\n  ]\n}\n")
	_, err := w.Write(b.Bytes())
	return err
}

func quote(s string) string {
	q, _ := json.Marshal(s) // a string always marshals
	return string(q)
}
