package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func do(t *testing.T, method, u, token string, form url.Values) (int, http.Header) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func TestChiRouter(t *testing.T) {
	clock := fixedClock(time.Unix(1_800_000_000, 0))
	srv := httptest.NewServer(newRouter(clock))
	defer srv.Close()

	// Public: per IP and chi route pattern; /prices/{sku} is one route.
	for i := range 60 {
		if code, _ := do(t, "GET", srv.URL+"/prices/"+string(rune('a'+i%26)), "", nil); code != 200 {
			t.Fatalf("price %d: %d", i, code)
		}
	}
	code, h := do(t, "GET", srv.URL+"/prices/z", "", nil)
	if code != 429 || h.Get("Retry-After") == "" {
		t.Fatalf("61st price: %d", code)
	}
	if code, h := do(t, "GET", srv.URL+"/prices", "", nil); code != 200 || h.Get("RateLimit") != `"per-ip-route";r=59;t=60` {
		t.Fatalf("/prices has its own bucket: %d %q", code, h.Get("RateLimit"))
	}

	// Login counts failures only.
	right := url.Values{"account": {"ann"}, "password": {"open sesame"}}
	wrong := url.Values{"account": {"ann"}, "password": {"guess"}}
	for range 10 {
		if code, _ := do(t, "POST", srv.URL+"/login", "", right); code != 200 {
			t.Fatalf("login: %d", code)
		}
	}
	for range 5 {
		if code, _ := do(t, "POST", srv.URL+"/login", "", wrong); code != 401 {
			t.Fatalf("wrong login: %d", code)
		}
	}
	if code, _ := do(t, "POST", srv.URL+"/login", "", right); code != 429 {
		t.Fatalf("after 5 failures: %d, want 429", code)
	}

	// The API limits after authentication and the access check: refused
	// requests move no counter.
	if code, _ := do(t, "GET", srv.URL+"/api/orders", "", nil); code != 401 {
		t.Fatalf("unauthenticated: %d", code)
	}
	for range 3 {
		if code, _ := do(t, "GET", srv.URL+"/api/reports", "carol-token", nil); code != 403 {
			t.Fatalf("forbidden: %d", code)
		}
	}
	code, h = do(t, "GET", srv.URL+"/api/orders", "carol-token", nil)
	if code != 200 || h.Get("RateLimit") != `"per-user";r=39;t=1, "per-tenant";r=999;t=60` {
		t.Fatalf("carol: %d %q", code, h.Get("RateLimit"))
	}
	if got := h.Get("RateLimit-Policy"); got != `"per-user";q=40;w=2, "per-tenant";q=1000;w=60` /* burst 40 refilled at 20/s */ {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	for range 40 {
		do(t, "GET", srv.URL+"/api/orders", "alice-token", nil)
	}
	if code, _ := do(t, "GET", srv.URL+"/api/orders", "alice-token", nil); code != 429 {
		t.Fatalf("alice past her burst: %d", code)
	}
	if code, _ := do(t, "GET", srv.URL+"/api/orders", "bob-token", nil); code != 200 {
		t.Fatalf("bob, same tenant: %d", code)
	}
}

// fixedClock is a Clock that always reads the same instant, so no window
// turns during the test; outside tests the limiters read the system clock.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
