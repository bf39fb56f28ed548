package server

import (
	"strings"
	"testing"
)

// TestOverrideValuesHidden: GET /v1/limiters names the attributes an
// override matches on, but shows the values (user or tenant ids) only to
// a request with the admin token.
func TestOverrideValuesHidden(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	_, _, b := ts.do("GET", "/v1/limiters", "")
	if strings.Contains(string(b), "vip") || !strings.Contains(string(b), `"match_attributes":["user"]`) {
		t.Errorf("without the admin token: %s", b)
	}
	_, _, b = ts.do("GET", "/v1/limiters", "", "Authorization", "Bearer wrong")
	if strings.Contains(string(b), "vip") {
		t.Errorf("with a wrong token: %s", b)
	}
	_, _, b = ts.do("GET", "/v1/limiters", "", "Authorization", "Bearer s3cret")
	if !strings.Contains(string(b), `"match":{"user":"vip"}`) {
		t.Errorf("with the admin token: %s", b)
	}
}

// TestLoopbackByDefault: with no address set, both listeners bind
// loopback only.
func TestLoopbackByDefault(t *testing.T) {
	if DefaultHTTPAddr != "127.0.0.1:8080" || DefaultGRPCAddr != "127.0.0.1:8081" {
		t.Errorf("defaults %s and %s, want loopback", DefaultHTTPAddr, DefaultGRPCAddr)
	}
}
