package config

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/gateway"
)

// TestGatewaySections reads token classes, token rules and routes, with a
// candidate's name defaulting to its limiter's.
func TestGatewaySections(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "valid", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.TokenClasses, (gateway.Weights{"input": 1, "output": 3, "cached_input": 0}); !reflect.DeepEqual(got, want) {
		t.Errorf("token classes = %v, want %v", got, want)
	}
	for i, l := range c.Limiters {
		if got := l.TokenRules; !reflect.DeepEqual(got, []string{"tpm"}) {
			t.Errorf("limiters[%d].token_rules = %q, want [tpm]", i, got)
		}
	}
	want := []Route{{Name: "chat", Candidates: []Candidate{
		{Name: "primary", Limiter: "route-primary", Attributes: floodgate.Attributes{"route": "primary"}},
		{Name: "route-backup", Limiter: "route-backup", Attributes: floodgate.Attributes{"route": "backup"}},
	}}}
	if !reflect.DeepEqual(c.Routes, want) {
		t.Errorf("routes = %+v, want %+v", c.Routes, want)
	}
}

// TestGatewaySectionsAbsent: a configuration without the sections has no
// token classes, no routes, and records usage into every rule.
func TestGatewaySectionsAbsent(t *testing.T) {
	c, err := Parse("x.yaml", []byte("limiters: [{name: a, rules: [{name: r, algorithm: gcra, limit: 1, window: 1s}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.TokenClasses != nil || c.Routes != nil || c.Limiters[0].TokenRules != nil {
		t.Errorf("got %v %v %v, want all nil", c.TokenClasses, c.Routes, c.Limiters[0].TokenRules)
	}
}
