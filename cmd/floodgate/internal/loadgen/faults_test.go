package loadgen

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// TestFailOpenCounted: answers of the failure policy (reason "store") are
// counted apart from the rules' decisions.
func TestFailOpenCounted(t *testing.T) {
	var n atomic.Uint64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		out := map[string]any{"allowed": true, "reason": ""}
		switch n.Add(1) % 4 {
		case 0:
			out["reason"] = "store" // fail-open
		case 1:
			out["allowed"], out["reason"] = false, "store" // fail-closed
		case 2:
			out["allowed"], out["reason"] = false, "limit"
		}
		json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	s, err := Run(t.Context(), Config{Target: HTTP, Addr: srv.URL, Concurrency: 1, Requests: 40, Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 40 || s.Allowed != 10 || s.Denied != 10 || s.FailOpen != 10 || s.FailClosed != 10 {
		t.Errorf("requests %d: allowed %d denied %d fail-open %d fail-closed %d; want 40: 10 each",
			s.Requests, s.Allowed, s.Denied, s.FailOpen, s.FailClosed)
	}
	var b strings.Builder
	s.Format(&b)
	if !strings.Contains(b.String(), "fail-open 10 (25.0%)  fail-closed 10 (25.0%)") {
		t.Errorf("summary:\n%s", b.String())
	}
}

// TestProgressWindow: the progress line's latency is that of the last
// interval, so a stall shows while it lasts and is gone after it.
func TestProgressWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &run{cfg: &Config{ProgressInterval: time.Second}, main: newRecorder(1), start: t0, measure: t0}
	var out bytes.Buffer
	p := &progress{r: r, w: &out, lastT: t0, width: func() int { return 0 }}
	for i, lat := range []time.Duration{time.Millisecond, 500 * time.Millisecond, time.Millisecond} {
		for range 100 {
			r.main.record(0, lat, outAllowed, nil)
		}
		p.line(t0.Add(time.Duration(i+1)*time.Second), false)
	}
	want := []string{"p99 1.00ms", "p99 500ms", "p99 1.00ms"}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i, l := range lines {
		if !strings.HasSuffix(l, want[i]) || !strings.Contains(l, "100 req/s") {
			t.Errorf("line %d: %q, want 100 req/s and %s", i, l, want[i])
		}
	}
}

// TestProgressNarrowTerminal: on a terminal narrower than the line, the
// line is cut to fit, since a wrapped line cannot be rewritten in place.
func TestProgressNarrowTerminal(t *testing.T) {
	defer func(tty func(io.Writer) bool, width func(io.Writer) int) {
		isTerminal, terminalWidth = tty, width
	}(isTerminal, terminalWidth)
	isTerminal = func(io.Writer) bool { return true }
	terminalWidth = func(io.Writer) int { return 40 }
	srv := checkServer(t, &every3rd{})
	var out bytes.Buffer
	if _, err := Run(t.Context(), Config{Target: HTTP, Addr: srv.URL, Concurrency: 1, Duration: 300 * time.Millisecond,
		Progress: &out, ProgressInterval: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.Trim(out.String(), "\r\n"), "\r") {
		if n := utf8.RuneCountInString(l); n > 39 {
			t.Errorf("a %d-column line on a 40-column terminal: %q", n, l)
		}
	}
}
