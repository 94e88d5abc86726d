package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
)

// Every file of envoyproxy/ratelimit's bad-config set, and the extensions' own mistakes, fails to
// load with an error that names the file, the line where there is one, and the reason.
func TestLoadConfigRefusesBadFiles(t *testing.T) {
	cases := []struct {
		file, line, reason string
	}{
		{"bad_yaml.yaml", "", "bad YAML: "},
		{"bad_unit.yaml", "line 6", `unknown unit "fortnight"`},
		{"misspelled_field.yaml", "line 5", `unknown field "ratelimit" in descriptor 1 under the domain`},
		{"misspelled_field_in_rate_limit.yaml", "line 7", `unknown field "requestsperunit" in rate_limit of key1_value1`},
		{"duplicate_descriptor.yaml", "line 5", "duplicate descriptor key1_value1 under the domain (first at line 3)"},
		{"duplicate_field.yaml", "line 4", `duplicate field "key"`},
		{"empty_domain.yaml", "line 1", "domain is empty or missing"},
		{"empty_domain_value.yaml", "line 1", "domain is empty or missing"},
		{"empty_key.yaml", "line 3", "key is empty or missing"},
		{"non_map_list.yaml", "line 3", `descriptor 1 under the domain is the str "a", want a map`},
		{"non_string_key.yaml", "line 1", `field name "0.25" (float) in the file is not a string`},
		{"unlimited_with_unit.yaml", "line 6", "is unlimited and also sets unit"},
		{"replaces_self.yaml", "line 10", `replaces "self", its own name`},
		{"replaces_empty.yaml", "line 7", "replaces entry 1 of key1 has no name"},
		{"bad_window.yaml", "line 5", `window "10 seconds"`},
		{"unknown_policy.yaml", "line 7", `unknown policy "leaky-counter"`},
		{"sliding_log.yaml", "line 7", "cannot give units back"},
		{"year.yaml", "line 5", `unit "year" in rate_limit of key1 is not supported: its window, 8760h0m0s, is past the longest the policies accept`},
		{"unit_and_window.yaml", "line 6", "sets both unit and window"},
		{"bucket_fraction.yaml", "line 7", "must come to a whole number per second: 10 per 1m0s is not"},
		{"negative_requests.yaml", "line 6", "requests_per_unit -1 in rate_limit of key1 is out of range"},
		{"no_requests.yaml", "line 5", "has no requests_per_unit"},
		{"descriptors_not_list.yaml", "line 3", "descriptors is a map, want a list of maps"},
		{"quota_mode.yaml", "line 4", `field "quota_mode" in descriptor 1 under the domain is not supported`},
		{"share_threshold.yaml", "line 4", `field "share_threshold" in descriptor 1 under the domain is not supported`},
		{"star_key.yaml", "line 3", `descriptor 1 under the domain: key "q*" has a *: envoyproxy/ratelimit reads it as a pattern over key_value, which is not supported`},
		{"shadow_not_bool.yaml", "line 4", `shadow_mode is the str "yes please", want true or false`},
		{"empty_file.yaml", "", "empty file"},
		{"huge_requests.yaml", "line 6", "requests_per_unit 99999999999999999999999 in rate_limit of key1 is out of range [0, 4294967295]"},
		{"middle_wildcard.yaml", "line 3", `descriptor 1 under the domain: value "/api/*/users" has a * before its end: only a value ending in * (a prefix) is supported`},
		{"two_wildcards.yaml", "line 3", `descriptor 1 under the domain: value "/api/*/files/*" has a * before its end`},
		{"name_collision.yaml", "line 8", "descriptor k_v under the domain has the name of the one at line 3 (a key and value are named key_value)"},
		{"path_collision.yaml", "line 7", "descriptor b under a has the path a.b of the one at line 3 (a '.' in a key or value reads as a level)"},
		{"metadata_not_map.yaml", "line 4", `metadata in descriptor 1 under the domain is the int "5", want a map`},
		{"long_window.yaml", "line 5", "the window of rate_limit of k (1200h0m0s) must be a whole number of milliseconds in [1ms, 1193h2m47.296s]"},
	}
	ents, err := os.ReadDir("testdata/bad")
	require.NoError(t, err)
	require.Len(t, ents, len(cases), "every file in testdata/bad has a case")
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("testdata", "bad", c.file)
			cfg, err := rls.LoadConfig(path)
			require.Nil(t, cfg)
			require.Error(t, err)
			require.Contains(t, err.Error(), path+": ")
			require.Contains(t, err.Error(), c.reason)
			var ce *rls.ConfigError
			require.True(t, errors.As(err, &ce))
			require.Equal(t, path, ce.File)
			if c.line != "" {
				require.Contains(t, err.Error(), path+": "+c.line+": ")
			}
		})
	}
}

// Fields a file written for envoyproxy/ratelimit may hold with a plain meaning load: quota_mode
// and share_threshold set to false (the features off, as they are here), and beside unlimited an
// empty unit or UNKNOWN, which set none. A template that writes every field made such files,
// which the reference loads.
func TestLoadConfigAcceptsWhatTheReferenceReadsAsNothing(t *testing.T) {
	cfg := parse(t, `domain: d
descriptors:
  - key: a
    quota_mode: false
    share_threshold: no
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {unlimited: true, unit: ""}
  - key: c
    rate_limit: {unlimited: true, unit: UNKNOWN}
  - key: e
    rate_limit: {unlimited: true, unit: unknown}
`)
	require.NotNil(t, cfg)
}

func TestLoadConfigDuplicateDomainAcrossFiles(t *testing.T) {
	_, err := rls.LoadConfig(filepath.Join("testdata", "dupdomain"))
	require.EqualError(t, err, filepath.Join("testdata", "dupdomain", "b.yaml")+`: duplicate domain "test-domain": already defined in `+filepath.Join("testdata", "dupdomain", "a.yaml"))
}

func TestLoadConfigMissingAndEmpty(t *testing.T) {
	_, err := rls.LoadConfig(filepath.Join("testdata", "nonexistent.yaml"))
	require.ErrorContains(t, err, "testdata/nonexistent.yaml: stat: no such file or directory")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not yaml"), 0o644))
	_, err = rls.LoadConfig(dir)
	require.EqualError(t, err, dir+": directory holds no .yaml or .yml file")
}

// A config file past 16 MiB is refused before it is parsed, and one of exactly 16 MiB is read.
func TestConfigFileSizeBounded(t *testing.T) {
	const limit = 16 << 20
	valid := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	padded := func(size int) []byte {
		b := make([]byte, size)
		copy(b, valid)
		for i := len(valid); i < size; i++ {
			b[i] = ' ' // trailing spaces: still the same YAML document
		}
		b[size-1] = '\n'
		return b
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, padded(limit+1), 0o644))
	_, err := rls.LoadConfig(big)
	require.EqualError(t, err, big+": larger than 16 MiB, which no config is")
	_, err = rls.ParseConfig("big.yaml", padded(limit+1))
	require.EqualError(t, err, "big.yaml: larger than 16 MiB, which no config is")

	require.NoError(t, os.WriteFile(big, padded(limit), 0o644))
	cfg, err := rls.LoadConfig(big)
	require.NoError(t, err)
	require.Equal(t, []string{"d"}, cfg.Domains())
}

// A directory holds one domain per file; other files, and names starting with '.', are skipped.
func TestLoadConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("a.yaml", "domain: alpha\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("b.yml", "domain: beta\n")
	write(".c.yaml", "not: [valid")
	write("README", "not yaml")
	cfg, err := rls.LoadConfig(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"alpha", "beta"}, cfg.Domains())
	require.Equal(t, []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml")}, cfg.Files())

	// A .yaml link that points nowhere is an error naming it, not a domain left out: a reload
	// would apply the directory without it.
	gone := filepath.Join(dir, "gone.yaml")
	require.NoError(t, os.Symlink(filepath.Join(dir, "missing", "gone.yaml"), gone))
	_, err = rls.LoadConfig(dir)
	var ce *rls.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, gone, ce.File)
}

// requests_per_unit 0 refuses every request whatever the policy and unit: a bucket's refill rule
// (whole per second) does not apply to a limit that builds no bucket.
func TestZeroPerUnitLoadsForEveryPolicy(t *testing.T) {
	for _, pol := range []string{"sliding-counter", "fixed-window", "token-bucket", "gcra", "leaky-bucket"} {
		for _, unit := range []string{"second", "minute", "hour", "day"} {
			src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: " + unit + "\n      requests_per_unit: 0\n      policy: " + pol + "\n"
			_, err := rls.ParseConfig("f.yaml", []byte(src))
			require.NoError(t, err, "%s per %s", pol, unit)
		}
	}
	_, err := rls.ParseConfig("f.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 0\n      policy: no-such\n"))
	require.ErrorContains(t, err, "no-such", "an unknown policy with requests_per_unit 0")
}
