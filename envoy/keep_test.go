package envoy_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/envoy"
)

func edgeConfig(t *testing.T, descriptor string) *envoy.Config {
	t.Helper()
	cfg, err := envoy.NewConfig(mustParse(t, "edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n"+descriptor))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestUpdateComesBack: a domain removed, or left without limits, and then
// configured again with other limits is served with them. Its old limiter
// held the name, so the update failed ("another live limiter of this
// name") until the garbage collector happened to free it.
func TestUpdateComesBack(t *testing.T) {
	for _, between := range []struct {
		name string
		cfg  func(t *testing.T) *envoy.Config
	}{
		{"removed", func(t *testing.T) *envoy.Config { cfg, _ := envoy.NewConfig(); return cfg }},
		{"unlimited", func(t *testing.T) *envoy.Config { return edgeConfig(t, "") }},
	} {
		t.Run(between.name, func(t *testing.T) {
			h := start(t, edgeConfig(t, "    rate_limit: {unit: minute, requests_per_unit: 2}\n"), nil, nil)
			if err := h.svc.Update(between.cfg(t), nil); err != nil {
				t.Fatal(err)
			}
			if err := h.svc.Update(edgeConfig(t, "    rate_limit: {unit: minute, requests_per_unit: 3}\n"), nil); err != nil {
				t.Fatalf("the domain's limits back: %v", err)
			}
			h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), ok, want{ok, 3, minute, 2, 30 * time.Second})
		})
	}
}

// TestKeep: Keep adds the named domains of the previous Config that the new
// one lacks, and nothing else.
func TestKeep(t *testing.T) {
	prev, err := envoy.NewConfig(
		mustParse(t, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"),
		mustParse(t, "b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := envoy.NewConfig(mustParse(t, "c.yaml", "domain: c\ndescriptors:\n  - key: k\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := cur.Keep(prev, "a", "nowhere").Domains()
	if len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Errorf("Keep(prev, a, nowhere).Domains() = %v, want [a c]", got)
	}
	if f := cur.Keep(prev, "a").File("a"); f != "a.yaml" {
		t.Errorf("a kept domain's File = %q, want a.yaml", f)
	}
	if got := cur.Domains(); len(got) != 1 {
		t.Errorf("Keep changed its receiver: %v", got)
	}
}
