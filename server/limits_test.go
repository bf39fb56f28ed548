package server

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRefundLongKey: a ticket for a key nearly as long as a check body
// allows can be refunded.
func TestRefundLongKey(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	long := strings.Repeat("k", DefaultMaxBodyBytes-100)
	body := `{"limiter":"leases","attributes":{"user":"` + long + `"}}`
	d := ts.decide("/v1/check", body)
	if !d.Allowed || d.Ticket == "" {
		t.Fatalf("lease: %+v", d)
	}
	if code, _, b := ts.do("POST", "/v1/refund", `{"ticket":"`+d.Ticket+`"}`); code != http.StatusNoContent {
		t.Fatalf("refund of a %d-byte ticket: %d %s", len(d.Ticket), code, b)
	}
	if d := ts.decide("/v1/check", body); !d.Allowed {
		t.Error("the refund did not release the lease")
	}
}

// TestHeaderTooLarge: a header over net/http's limit is answered 431 as
// problem+json, like every other error.
func TestHeaderTooLarge(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	c, err := net.Dial("tcp", ts.HTTPAddress())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n"))
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p problem
	if err := decodeJSON(resp.Body, &p, 1<<20); err != nil {
		t.Fatalf("body: %v", err)
	}
	if resp.StatusCode != 431 || resp.Header.Get("Content-Type") != "application/problem+json" ||
		p.Status != 431 || p.Type != problemBase+kindHeaderTooLarge {
		t.Errorf("%d %s %+v", resp.StatusCode, resp.Header.Get("Content-Type"), p)
	}
}
