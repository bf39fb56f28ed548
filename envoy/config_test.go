package envoy_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/envoy"
)

func TestLoadDir(t *testing.T) {
	cfg, err := envoy.LoadDir("testdata/edge")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Domains(), []string{"edge"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Domains() = %v, want %v", got, want)
	}
	if got, want := cfg.File("edge"), filepath.Join("testdata", "edge", "edge.yaml"); got != want {
		t.Errorf("File(edge) = %q, want %q", got, want)
	}
	empty, err := envoy.LoadDir(t.TempDir())
	if err != nil || len(empty.Domains()) != 0 {
		t.Errorf("empty dir: %v, %v", empty.Domains(), err)
	}
	if _, err := envoy.LoadDir("testdata/missing"); err == nil {
		t.Error("missing dir: no error")
	}
}

// LoadDir reads *.yaml and *.yml, skips dot files, and refuses a domain
// configured twice.
func TestLoadDirDuplicateDomain(t *testing.T) {
	_, err := envoy.LoadDir("testdata/dupdomain")
	want := `testdata/dupdomain/b.yml:1:1: domain: duplicate domain "shared" (also in testdata/dupdomain/a.yaml)`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
	var ce *envoy.ConfigError
	if !errors.As(err, &ce) || ce.Line != 1 || ce.Field != "domain" {
		t.Errorf("error %#v is not a *ConfigError naming line 1 and the domain", err)
	}
}

// LoadDir follows symbolic links, as a Kubernetes ConfigMap mount has them.
func TestLoadDirSymlinks(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "x.yaml"), []byte("domain: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "x.yaml"), filepath.Join(dir, "x.yaml")); err != nil {
		t.Skip(err)
	}
	cfg, err := envoy.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Domains(); !reflect.DeepEqual(got, []string{"x"}) {
		t.Errorf("Domains() = %v", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for file, want := range map[string]string{
		"ratelimit_key.yaml":        "testdata/invalid/ratelimit_key.yaml:4:5: descriptors[0].ratelimit: unknown key (did you mean rate_limit?)",
		"unknown_key.yaml":          "testdata/invalid/unknown_key.yaml:4:5: descriptors[0].rate_limt: unknown key (did you mean rate_limit?)",
		"bad_unit.yaml":             `testdata/invalid/bad_unit.yaml:5:13: descriptors[0].rate_limit.unit: unknown unit "fortnight": want one of second, minute, hour, day, week, month, year`,
		"unlimited_unit.yaml":       "testdata/invalid/unlimited_unit.yaml:6:13: descriptors[0].rate_limit.unit: must not be set when unlimited is true",
		"no_domain.yaml":            "testdata/invalid/no_domain.yaml:1:1: domain: missing: every file configures one domain",
		"duplicate_descriptor.yaml": `testdata/invalid/duplicate_descriptor.yaml:5:10: descriptors[1]: duplicate descriptor "a_b" (also at line 3)`,
		"replaces_self.yaml":        `testdata/invalid/replaces_self.yaml:5:13: descriptors[0].rate_limit.replaces: must not name the limit itself ("x")`,
		"share_no_wildcard.yaml":    "testdata/invalid/share_no_wildcard.yaml:5:5: descriptors[0].share_threshold: applies only to wildcard values (holding '*')",
		"bad_algorithm.yaml":        `testdata/invalid/bad_algorithm.yaml:7:30: descriptors[0].rate_limit.floodgate.algorithm: unknown algorithm "leaky_bucket": want fixed_window, sliding_window, token_bucket or gcra`,
		"burst_fixed_window.yaml":   "testdata/invalid/burst_fixed_window.yaml:7:26: descriptors[0].rate_limit.floodgate.burst: applies to token_bucket and gcra only, not fixed_window",
		"grant_gcra.yaml":           "testdata/invalid/grant_gcra.yaml:7:43: descriptors[0].rate_limit.floodgate.grant: applies to fixed_window and token_bucket only, not gcra",
		"negative_limit.yaml":       `testdata/invalid/negative_limit.yaml:6:26: descriptors[0].rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, got "-1"`,
		"syntax.yaml":               "testdata/invalid/syntax.yaml: line 3: did not find expected ',' or '}'",
		"missing_key.yaml":          "testdata/invalid/missing_key.yaml:3:5: descriptors[0].key: missing: every descriptor needs a key",
		"window_too_long.yaml":      "testdata/invalid/window_too_long.yaml:5:7: descriptors[0].rate_limit.unit_multiplier: window of 200 year is too long (at most about 100 years)",
		"engine_rejects.yaml":       "testdata/invalid/engine_rejects.yaml:5:7: descriptors[0].rate_limit.requests_per_unit: limit or burst 4000000000 times window 8760h0m0s exceeds 2^51 microsecond-units; use a shorter window or a smaller limit",
		"bad_bool.yaml":             `testdata/invalid/bad_bool.yaml:4:18: descriptors[0].shadow_mode: want true or false, got "yes please"`,
		"reserve_sliding.yaml":      "testdata/invalid/reserve_sliding.yaml:7:55: descriptors[0].rate_limit.floodgate.reserve: applies to fixed_window only, not sliding_window",
		"reserve_no_hold.yaml":      "testdata/invalid/reserve_no_hold.yaml:7:18: descriptors[0].rate_limit.floodgate.hold: missing: how long a reservation is held unless a charge settles it, such as 10m",
		"hold_no_reserve.yaml":      "testdata/invalid/hold_no_reserve.yaml:7:25: descriptors[0].rate_limit.floodgate.hold: applies with reserve only: set reserve, the units each check reserves",
		"reserve_over_limit.yaml":   "testdata/invalid/reserve_over_limit.yaml:7:28: descriptors[0].rate_limit.floodgate.reserve: 8000 is more than requests_per_unit 1000: no check could ever reserve it",
		"reserve_grant.yaml":        "testdata/invalid/reserve_grant.yaml:7:28: descriptors[0].rate_limit.floodgate.reserve: cannot be combined with grant: a grant cannot see the units held",
		"bad_hold.yaml":             `testdata/invalid/bad_hold.yaml:7:38: descriptors[0].rate_limit.floodgate.hold: want a duration such as 10m, got "soon"`,
		"reserve_zero.yaml":         "testdata/invalid/reserve_zero.yaml:7:28: descriptors[0].rate_limit.floodgate.reserve: must be at least 1",
	} {
		t.Run(file, func(t *testing.T) {
			_, err := envoy.LoadFiles(filepath.Join("testdata", "invalid", file))
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != want {
				t.Errorf("error = %s\nwant    %s", err, want)
			}
		})
	}
}

// Every mistake in a file is reported, not just the first.
func TestConfigErrorsJoined(t *testing.T) {
	_, err := envoy.ParseFile("f.yaml", []byte("domain: ''\nextra: 1\ndescriptors:\n  - key: ''\n"))
	want := "f.yaml:1:9: domain: must not be empty\nf.yaml:2:1: extra: unknown key (known keys: domain, descriptors)\nf.yaml:4:10: descriptors[0].key: must not be empty"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

func FuzzParseFile(f *testing.F) {
	for _, dir := range []string{"testdata/edge", "testdata/invalid"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := envoy.ParseFile("fuzz.yaml", data)
		if err != nil {
			if file != nil {
				t.Fatal("a file and an error")
			}
			return
		}
		if file.Domain == "" {
			t.Fatal("parsed a file without a domain")
		}
		// A parsed file always makes a config (or a located error).
		if _, err := envoy.NewConfig(file); err != nil {
			var ce *envoy.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("NewConfig: %v is not a *ConfigError", err)
			}
		}
	})
}

// YAML anchors and aliases work like the values they name, and cannot
// multiply descriptors without bound.
func TestAliases(t *testing.T) {
	good := "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &lim {unit: minute, requests_per_unit: 3}\n  - key: b\n    rate_limit: *lim\n"
	if _, err := envoy.ParseFile("a.yaml", []byte(good)); err != nil {
		t.Error(err)
	}
	bomb := "domain: d\ndescriptors: &l0\n  - {key: a}\n"
	for i := 1; i <= 20; i++ {
		bomb += fmt.Sprintf("x%d: &l%d\n  - {key: a, descriptors: *l%d}\n  - {key: b, descriptors: *l%d}\n", i, i, i-1, i-1)
	}
	bomb = strings.Replace(bomb, "descriptors: &l0", "descriptors: *l20\nseed: &l0", 1)
	bomb = strings.Replace(bomb, "descriptors: *l20\n", "", 1) + "descriptors: *l20\n"
	_, err := envoy.ParseFile("bomb.yaml", []byte(bomb))
	if err == nil || !strings.Contains(err.Error(), "more than 100000 descriptors") {
		t.Errorf("error = %v", err)
	}
}

// A duplicate domain is reported with the other files' errors, and with
// the duplicate's own: validate's promise is every error at once.
func TestDuplicateDomainWithOtherErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.yaml": "domain: shared\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yaml": "domain: shared\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
		"c.yaml": "domain: other\ndescriptors:\n  - key: k\n    ratelimit: {unit: second, requests_per_unit: 1}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := envoy.LoadDir(dir)
	for _, want := range []string{
		`b.yaml:1:1: domain: duplicate domain "shared" (also in ` + filepath.Join(dir, "a.yaml") + `)`,
		`b.yaml:4:24: descriptors[0].rate_limit.unit: unknown unit "fortnight"`,
		`c.yaml:4:5: descriptors[0].ratelimit: unknown key (did you mean rate_limit?)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v\nwant it to hold %s", err, want)
		}
	}
}
