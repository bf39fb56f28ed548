package config

import (
	"path/filepath"
	"testing"
)

// With Envoy domains served, a configuration that names only the store is
// valid; without them it is still rejected.
func TestStoreOnlyWithEnvoyDomains(t *testing.T) {
	storeOnly := []byte("store:\n  redis: {url: \"redis://127.0.0.1:6379/0\"}\nfailure_policy: closed\n")
	c, err := ParseWith("store.yaml", storeOnly, Options{EnvoyDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Limiters) != 0 || c.Store.Redis == nil || c.Store.Redis.URL != "redis://127.0.0.1:6379/0" {
		t.Errorf("store-only config = %+v", c)
	}
	if _, err := Parse("store.yaml", storeOnly); err == nil || err.Error() != "store.yaml:1:1: limiters: must hold at least one limiter" {
		t.Errorf("without Envoy domains: %v", err)
	}
	// An empty list is as good as none; the other sections still count.
	c, err = ParseWith("empty.yaml", []byte("limiters: []\ntoken_classes: {input: 1}\n"), Options{EnvoyDomains: true})
	if err != nil || len(c.Limiters) != 0 || c.TokenClasses == nil {
		t.Errorf("limiters: [] with Envoy domains: %+v, %v", c, err)
	}
	for _, name := range []string{"no_limiters.yaml", "empty_limiters.yaml"} {
		if _, err := LoadWith(filepath.Join("testdata", "invalid", name), Options{EnvoyDomains: true}); err != nil {
			t.Errorf("%s with Envoy domains: %v", name, err)
		}
	}
}
