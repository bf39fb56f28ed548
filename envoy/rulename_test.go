package envoy_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/envoy"
	"github.com/floodgate-go/floodgate/store/memory"
)

// Operators read each limit under its descriptor path as written, while
// its rule keeps the escaped name the store's keys are made of; two limits
// of one path are told apart in both.
func TestRuleNamesAsWritten(t *testing.T) {
	f, err := envoy.ParseFile("edge.yaml", []byte(`domain: edge
descriptors:
  - key: path
    value: /v1/*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: a.b
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 0}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoy.NewConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New(nil)
	defer mem.Close()
	svc, err := envoy.New(mem, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, ls := range svc.Limits() {
		for _, r := range ls.Rules {
			got[r.Name] = svc.RuleName(ls.Name, r.Name)
		}
	}
	want := map[string]string{
		"path_-2fv1-2f-2a": "path_/v1/*",
		"a.b":              "a.b",
		"a.b-g1":           "a.b-g1", // the limit of 0, named after the counted one
		"remote_address":   "remote_address",
	}
	if len(got) != len(want) {
		t.Errorf("rules %v, want %v", got, want)
	}
	for rule, w := range want {
		if got[rule] != w {
			t.Errorf("RuleName(envoy.edge, %q) = %q, want %q (all: %v)", rule, got[rule], w, got)
		}
	}
	if n := svc.RuleName("api", "path_-2fv1-2f-2a"); n != "path_-2fv1-2f-2a" {
		t.Errorf("another limiter's rule: %q, want its own name", n)
	}
}
