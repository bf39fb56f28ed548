package envoy_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/envoy"
)

// refConfig is a file of the reference service's config tests.
func refConfig(name string) string { return filepath.Join("testdata", "reference", "config", name) }

// Every file the reference service's config tests reject is rejected,
// with an error that names the file, and where it is known the line and
// the field at fault.
func TestReferenceRejectedConfigs(t *testing.T) {
	for _, tc := range []struct {
		files []string
		want  string // a part of the error
	}{
		{[]string{"empty_domain.yaml"}, "empty_domain.yaml:1:1: domain: missing"},
		{[]string{"basic_config.yaml", "duplicate_domain.yaml"}, `duplicate_domain.yaml:1:1: domain: duplicate domain "test-domain"`},
		{[]string{"empty_key.yaml"}, "empty_key.yaml:3:5: descriptors[0].key: missing"},
		{[]string{"duplicate_key.yaml"}, `duplicate_key.yaml:6:10: descriptors[1]: duplicate descriptor "key1_value1"`},
		// Merging a domain across files (MERGE_DOMAIN_CONFIG) is not
		// supported: the second file is a duplicate domain either way.
		{[]string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"}, `duplicate domain "test-domain"`},
		{[]string{"bad_limit_unit.yaml"}, `bad_limit_unit.yaml:6:13: descriptors[0].rate_limit.unit: unknown unit "foo"`},
		{[]string{"replaces_self.yaml"}, `replaces_self.yaml:8:17: descriptors[0].descriptors[0].rate_limit.replaces: must not name the limit itself ("self")`},
		{[]string{"replaces_empty.yaml"}, "replaces_empty.yaml:10:15: descriptors[0].descriptors[0].rate_limit.replaces[0].name: must not be empty"},
		{[]string{"bad_yaml.yaml"}, "bad_yaml.yaml: line 2: found unexpected end of stream"},
		{[]string{"misspelled_key.yaml"}, "misspelled_key.yaml:5:5: descriptors[0].ratelimit: unknown key"},
		{[]string{"misspelled_key2.yaml"}, "misspelled_key2.yaml:7:7: descriptors[0].rate_limit.requestsperunit: unknown key"},
		{[]string{"non_string_key.yaml"}, "non_string_key.yaml:1:1: 0.25: unknown key"},
		{[]string{"non_map_list.yaml"}, "non_map_list.yaml:3:5: descriptors[0]: want a mapping"},
		{[]string{"unlimited_with_unit.yaml"}, "unlimited_with_unit.yaml:6:13: descriptors[0].rate_limit.unit: must not be set when unlimited is true"},
	} {
		paths := make([]string, len(tc.files))
		for i, f := range tc.files {
			paths[i] = refConfig(f)
		}
		_, err := envoy.LoadFiles(paths...)
		if err == nil {
			t.Errorf("%v: accepted, want an error containing %q", tc.files, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error\n%v\nwant it to contain %q", tc.files, err, tc.want)
		}
	}
}

// The files the reference service's config tests accept load, and their
// descriptors match the limits the reference finds for them.
func TestReferenceAcceptedConfigs(t *testing.T) {
	type match struct {
		kv    []string
		limit uint32 // 0: no limit
		unit  string
		name  string
	}
	unlimited := uint32(math.MaxUint32)
	for _, tc := range []struct {
		file    string
		matches []match
	}{
		{"basic_config.yaml", []match{
			{kv: []string{"key1", "value1"}},
			{kv: []string{"key1", "value1", "subkey1", "something"}, limit: 5, unit: "SECOND"},
			{kv: []string{"key1", "value1", "subkey1", "subvalue1"}, limit: 10, unit: "SECOND"},
			{kv: []string{"key2", "something"}, limit: 20, unit: "MINUTE"},
			{kv: []string{"key2", "value2"}, limit: 30, unit: "MINUTE"},
			{kv: []string{"key2", "value3"}},
			{kv: []string{"key3", "foo"}, limit: 1, unit: "HOUR"},
			{kv: []string{"key4", "foo"}, limit: 1, unit: "DAY", name: "key4_rate_limit"},
			{kv: []string{"key5", "value5"}, limit: 15, unit: "DAY"},
			{kv: []string{"key5", "value5", "subkey5", "subvalue5"}, limit: 25, unit: "DAY"},
			{kv: []string{"key6", "foo"}, limit: unlimited},
			{kv: []string{"key7", "foo"}, limit: 70, unit: "MINUTE"},
			{kv: []string{"key2", "value2", "subkey", "x"}},
		}},
		{"shadowmode_config.yaml", []match{
			{kv: []string{"key1", "value1", "subkey1", "subvalue1"}, limit: 10, unit: "SECOND"},
			{kv: []string{"key2", "other"}, limit: 20, unit: "MINUTE"},
			{kv: []string{"key2", "value2"}, limit: 30, unit: "MINUTE"},
		}},
		{"wildcard.yaml", []match{
			{kv: []string{"noVal", "foo1"}, limit: 20, unit: "MINUTE"},
			{kv: []string{"wild", "foo1"}, limit: 20, unit: "MINUTE"},
			{kv: []string{"wild", "foo"}, limit: 20, unit: "MINUTE"},
			{kv: []string{"wild", "bar"}},
			{kv: []string{"noWild", "foo1"}},
			{kv: []string{"nestedWild", "val1", "wild", "goo2"}, limit: 20, unit: "MINUTE"},
			{kv: []string{"midWild", "barab"}, limit: 20, unit: "MINUTE"},
			{kv: []string{"midWild", "bar123b"}, limit: 20, unit: "MINUTE"},
			{kv: []string{"midWild", "barb"}, limit: 20, unit: "MINUTE"},
			{kv: []string{"midWild", "bara"}},
			{kv: []string{"midWild", "xbarb"}},
			{kv: []string{"multiWild", "foo123bar456baz"}, limit: 10, unit: "MINUTE"},
			{kv: []string{"multiWild", "foobarbaz"}, limit: 10, unit: "MINUTE"},
			{kv: []string{"multiWild", "foo123baz"}},
			{kv: []string{"multiWild", "bar456baz"}},
		}},
		{"share_threshold.yaml", []match{
			{kv: []string{"files", "files/a.pdf"}, limit: 100, unit: "MINUTE"},
			{kv: []string{"nested", "parent", "files", "nested/x"}, limit: 200, unit: "MINUTE"},
			{kv: []string{"files", "top/a", "files", "nested/b"}, limit: 300, unit: "MINUTE"},
			{kv: []string{"file", "test1"}, limit: 50, unit: "MINUTE"},
			{kv: []string{"file", "test2"}, limit: 100, unit: "MINUTE"},
			{kv: []string{"midpath", "/api/users/v1"}, limit: 100, unit: "MINUTE"},
			{kv: []string{"multiroute", "svcAepBrpc"}, limit: 50, unit: "MINUTE"},
			{kv: []string{"tenant", "t1prod", "resource", "resAv2"}, limit: 60, unit: "MINUTE"},
		}},
		// metadata is accepted (and not returned: no dynamic metadata).
		{"metadata.yaml", []match{
			{kv: []string{"key1", "value1", "subkey1", "x"}, limit: 5, unit: "SECOND"},
			{kv: []string{"key2", "x"}, limit: 20, unit: "MINUTE"},
		}},
	} {
		cfg, err := envoy.LoadFiles(refConfig(tc.file))
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		h := start(t, cfg, nil, nil)
		for _, m := range tc.matches {
			s := h.ask("test-domain", 0, desc(m.kv...)).Statuses[0]
			switch {
			case m.limit == 0 && (s.CurrentLimit != nil || s.LimitRemaining != 0):
				t.Errorf("%s %v: %v, want no limit", tc.file, m.kv, s)
			case m.limit == unlimited && (s.CurrentLimit != nil || s.LimitRemaining != unlimited):
				t.Errorf("%s %v: %v, want unlimited", tc.file, m.kv, s)
			case m.limit != 0 && m.limit != unlimited && (s.CurrentLimit.GetRequestsPerUnit() != m.limit ||
				s.CurrentLimit.GetUnit().String() != m.unit || s.CurrentLimit.GetName() != m.name):
				t.Errorf("%s %v: %v, want %d per %s named %q", tc.file, m.kv, s, m.limit, m.unit, m.name)
			}
		}
	}
}

// share_threshold: every value a sharing wildcard matches is counted
// together, at every level (the reference's TestShareThreshold).
func TestReferenceShareThreshold(t *testing.T) {
	cfg, err := envoy.LoadFiles(refConfig("share_threshold.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cfg, nil, nil)
	for i, v := range []string{"files/a.pdf", "files/b.csv", "files/c"} {
		h.check(h.ask("test-domain", 0, desc("files", v)), ok, want{ok, 100, minute, uint32(99 - i), 30 * time.Second})
	}
	for i, kv := range [][]string{{"user", "user/1", "resource", "res/a", "action", "get"}, {"user", "user/2", "resource", "res/b", "action", "get"}} {
		h.check(h.ask("test-domain", 0, desc(kv...)), ok, want{ok, 150, minute, uint32(149 - i), 30 * time.Second})
	}
	// file/* under path/* does not share: a new file value, a new counter.
	for _, kv := range [][]string{{"path", "path/1", "file", "file/a", "type", "pdf"}, {"path", "path/2", "file", "file/b", "type", "pdf"}} {
		h.check(h.ask("test-domain", 0, desc(kv...)), ok, want{ok, 120, minute, 119, 30 * time.Second})
	}
	// An exact value beats the sharing wildcard, and has its own counter.
	h.check(h.ask("test-domain", 0, desc("file", "test1")), ok, want{ok, 50, minute, 49, 30 * time.Second})
	h.check(h.ask("test-domain", 0, desc("file", "test2")), ok, want{ok, 100, minute, 99, 30 * time.Second})
	h.check(h.ask("test-domain", 0, desc("file", "test3")), ok, want{ok, 100, minute, 98, 30 * time.Second})
	// Middle wildcards share too.
	h.check(h.ask("test-domain", 0, desc("midpath", "/api/a/v1")), ok, want{ok, 100, minute, 99, 30 * time.Second})
	h.check(h.ask("test-domain", 0, desc("midpath", "/apiv1")), ok, want{ok, 100, minute, 98, 30 * time.Second})
}
