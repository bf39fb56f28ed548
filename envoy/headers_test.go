package envoy_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/floodgate-go/floodgate/envoy"
)

func headerMap(hs []*corev3.HeaderValue) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Key] = h.Value
	}
	return m
}

// The quota headers describe the descriptor closest to its limit, or the
// one over it, as the reference service's LIMIT_RESPONSE_HEADERS_ENABLED
// does; IETF adds the RateLimit-Policy and RateLimit pair.
func TestResponseHeaders(t *testing.T) {
	hs := envoy.DefaultHeaders
	hs.IETF = true
	h := start(t, loadEdge(t), nil, &envoy.Options{Headers: &hs})
	check := func(got map[string]string, want map[string]string) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("headers = %v, want %v", got, want)
			return
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
			}
		}
	}
	// The fewest left: the address (2 of 3) over the user (99 of 100).
	resp := h.ask("edge", 0, desc("tenant", "t", "user", "vip"), desc("remote_address", "10.0.0.1"))
	check(headerMap(resp.ResponseHeadersToAdd), map[string]string{
		"RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "30",
		"RateLimit-Policy": `"default";q=3;w=60`, "RateLimit": `"default";r=2;t=30`,
	})
	// Over the limit wins, even with more left elsewhere.
	resp = h.ask("edge", 0, desc("remote_address", "10.0.0.2"), desc("remote_address", "50.0.0.5"))
	check(headerMap(resp.ResponseHeadersToAdd), map[string]string{
		"RateLimit-Limit": "0", "RateLimit-Remaining": "0", "RateLimit-Reset": "1",
		"RateLimit-Policy": `"default";q=0;w=1`, "RateLimit": `"default";r=0;t=1`,
	})
	// No limit anywhere: no headers.
	if resp := h.ask("edge", 0, desc("path", "/health"), desc("nothing", "here")); len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers without a limit: %v", resp.ResponseHeadersToAdd)
	}
	// Without Headers, none.
	plain := start(t, loadEdge(t), nil, nil)
	if resp := plain.ask("edge", 0, desc("remote_address", "10.0.0.1")); len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers without the option: %v", resp.ResponseHeadersToAdd)
	}
}
