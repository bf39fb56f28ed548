package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// every3rd answers like a limiter that denies every third request it sees.
type every3rd struct {
	n     atomic.Uint64
	mu    sync.Mutex
	keys  map[string]int
	delay time.Duration
}

// next counts a request for key and reports whether it is allowed.
func (e *every3rd) next(key string) bool {
	e.mu.Lock()
	if e.keys == nil {
		e.keys = map[string]int{}
	}
	e.keys[key]++
	e.mu.Unlock()
	if e.delay > 0 {
		time.Sleep(e.delay)
	}
	return e.n.Add(1)%3 != 0
}

// checkServer serves POST /v1/check, answering with e, and fails the test on
// a request that is not what floodgate's API expects.
func checkServer(t *testing.T, e *every3rd) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/check" {
			t.Errorf("got %s %s, want POST /v1/check", req.Method, req.URL.Path)
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		var body struct {
			Limiter    string            `json:"limiter"`
			Attributes map[string]string `json:"attributes"`
			Cost       *int              `json:"cost"`
		}
		dec := json.NewDecoder(req.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			t.Errorf("decoding request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if body.Limiter != "api" || len(body.Attributes) != 1 || body.Cost == nil || *body.Cost != 1 {
			t.Errorf("request = %+v, want limiter api, one attribute, cost 1", body)
		}
		key, ok := body.Attributes["user"]
		if n, found := strings.CutPrefix(key, "user-"); !ok || !found || strings.Trim(n, "0123456789") != "" || n == "" {
			t.Errorf("attributes = %v, want user: user-N (the prefix once, then digits)", body.Attributes)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"allowed": e.next(key), "reason": "", "limit": 10})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// fakeRLS is an Envoy RateLimitService answering with e.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	t    *testing.T
	e    *every3rd
	fail atomic.Uint64 // fail every fail-th request when > 0
	n    atomic.Uint64
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() != "edge" || len(req.GetDescriptors()) != 1 || req.GetHitsAddend() != 1 {
		f.t.Errorf("request = %v, want domain edge, one descriptor, hits_addend 1", req)
	}
	entries := req.GetDescriptors()[0].GetEntries()
	if len(entries) != 1 || entries[0].GetKey() != "user" {
		f.t.Errorf("entries = %v, want one with key user", entries)
		return nil, status.Error(codes.InvalidArgument, "bad descriptor")
	}
	if k := f.fail.Load(); k > 0 && f.n.Add(1)%k == 0 {
		return nil, status.Error(codes.Unavailable, "try later")
	}
	code := rlsv3.RateLimitResponse_OK
	if !f.e.next(entries[0].GetValue()) {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: code}, nil
}

// grpcServer starts f on a loopback port and returns its address.
func grpcServer(t *testing.T, f *fakeRLS) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(s, f)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestHTTPClosedModelExactCounts(t *testing.T) {
	e := &every3rd{}
	srv := checkServer(t, e)
	s, err := Run(t.Context(), Config{
		Target: HTTP, Addr: srv.URL, Keys: 7,
		Concurrency: 4, Requests: 300, Duration: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 300 || s.Allowed != 200 || s.Denied != 100 || s.Errors != 0 {
		t.Errorf("requests %d, allowed %d, denied %d, errors %d; want 300, 200, 100, 0 (errors: %v)",
			s.Requests, s.Allowed, s.Denied, s.Errors, s.ErrorKinds)
	}
	if got := s.Latency.Count(); got != 300 {
		t.Errorf("latency count = %d, want 300", got)
	}
	if got, want := e.n.Load(), uint64(300); got != want {
		t.Errorf("server saw %d requests, want %d", got, want)
	}
	if got := len(e.keys); got != 7 {
		t.Errorf("server saw %d distinct keys, want 7: %v", got, e.keys)
	}
}

func TestGRPCClosedModelExactCounts(t *testing.T) {
	f := &fakeRLS{t: t, e: &every3rd{}}
	addr := grpcServer(t, f)
	s, err := Run(t.Context(), Config{
		Target: GRPC, Addr: addr, Domain: "edge", Keys: 5, Distribution: Zipf,
		Concurrency: 8, Requests: 600, Duration: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 600 || s.Allowed != 400 || s.Denied != 200 || s.Errors != 0 {
		t.Errorf("requests %d, allowed %d, denied %d, errors %d; want 600, 400, 200, 0 (errors: %v)",
			s.Requests, s.Allowed, s.Denied, s.Errors, s.ErrorKinds)
	}
	if got := len(f.e.keys); got > 5 {
		t.Errorf("server saw %d distinct keys, want at most 5", got)
	}
}

func TestGRPCErrorsAreCounted(t *testing.T) {
	f := &fakeRLS{t: t, e: &every3rd{}}
	f.fail.Store(4)
	addr := grpcServer(t, f)
	s, err := Run(t.Context(), Config{
		Target: GRPC, Addr: addr, Domain: "edge",
		Concurrency: 2, Requests: 100, Duration: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 100 || s.Errors != 25 || s.Allowed+s.Denied != 75 {
		t.Errorf("requests %d, allowed %d, denied %d, errors %d; want 100 with 25 errors",
			s.Requests, s.Allowed, s.Denied, s.Errors)
	}
	want := []ErrorCount{{Message: "gRPC Unavailable: try later", Count: 25}}
	if len(s.ErrorKinds) != 1 || s.ErrorKinds[0] != want[0] {
		t.Errorf("ErrorKinds = %v, want %v", s.ErrorKinds, want)
	}
}

func TestOpenModelKeepsTheRate(t *testing.T) {
	srv := checkServer(t, &every3rd{})
	start := time.Now()
	s, err := Run(t.Context(), Config{
		Target: HTTP, Addr: srv.URL, Rate: 400, Concurrency: 16, Duration: time.Second,
	})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// The schedule holds exactly 400 requests in the second.
	if got := s.Requests + s.Missed; got != 400 {
		t.Errorf("requests %d + missed %d = %d, want 400", s.Requests, s.Missed, got)
	}
	if s.Throughput < 320 || s.Throughput > 440 {
		t.Errorf("throughput = %.1f req/s (%d requests in %v, %d missed), want 400 - 20%% + 10%%",
			s.Throughput, s.Requests, s.Elapsed, s.Missed)
	}
	if took < 950*time.Millisecond || took > 2*time.Second {
		t.Errorf("run took %v, want about 1s", took)
	}
}

func TestOpenModelMeasuresFromIntendedTime(t *testing.T) {
	// One worker, a service that takes 20ms and 100 req/s offered: requests
	// queue behind each other, and their latency must show the queueing,
	// not just the 20ms each spends on the wire.
	srv := checkServer(t, &every3rd{delay: 20 * time.Millisecond})
	s, err := Run(t.Context(), Config{
		Target: HTTP, Addr: srv.URL, Rate: 100, Concurrency: 1, Duration: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Missed == 0 {
		t.Errorf("missed = 0, want some: one 20ms worker cannot keep up with 100 req/s")
	}
	if p99 := s.Latency.Quantile(0.99); p99 < 100*time.Millisecond {
		t.Errorf("p99 = %v, want ≥ 100ms of queueing", p99)
	}
}

func TestRunStopsAtDuration(t *testing.T) {
	srv := checkServer(t, &every3rd{delay: time.Millisecond})
	start := time.Now()
	s, err := Run(t.Context(), Config{
		Target: HTTP, Addr: srv.URL, Concurrency: 4, Duration: 300 * time.Millisecond,
		Warmup: 100 * time.Millisecond,
	})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took < 400*time.Millisecond || took > time.Second {
		t.Errorf("run took %v, want 400ms (100ms warm-up + 300ms)", took)
	}
	if s.Elapsed < 300*time.Millisecond || s.Elapsed > 600*time.Millisecond {
		t.Errorf("Elapsed = %v, want about 300ms", s.Elapsed)
	}
	if s.Requests == 0 {
		t.Errorf("no requests measured")
	}
}

func TestWarmupIsNotMeasured(t *testing.T) {
	e := &every3rd{}
	srv := checkServer(t, e)
	s, err := Run(t.Context(), Config{
		Target: HTTP, Addr: srv.URL, Rate: 200, Duration: 250 * time.Millisecond,
		Warmup: 250 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Requests + s.Missed; got != 50 {
		t.Errorf("measured %d requests + %d missed, want 50", s.Requests, s.Missed)
	}
	if got := e.n.Load(); got != 100 && s.Missed == 0 {
		t.Errorf("server saw %d requests, want 100 (50 warm-up + 50 measured)", got)
	}
}

func TestCancelReturnsPartialSummary(t *testing.T) {
	srv := checkServer(t, &every3rd{})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	s, err := Run(ctx, Config{Target: HTTP, Addr: srv.URL, Concurrency: 2, Duration: time.Minute})
	if err != context.DeadlineExceeded {
		t.Errorf("err = %v, want context.DeadlineExceeded", err)
	}
	if s.Requests == 0 || s.Errors != 0 {
		t.Errorf("requests %d, errors %d; want some requests and no errors", s.Requests, s.Errors)
	}
}

func TestProgressLines(t *testing.T) {
	srv := checkServer(t, &every3rd{})
	var out bytes.Buffer
	s, err := Run(t.Context(), Config{
		Target: HTTP, Addr: srv.URL, Concurrency: 2, Duration: 350 * time.Millisecond,
		Progress: &out, ProgressInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("got %d progress lines, want ≥ 3:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		for _, part := range []string{"req/s", "allowed ", "denied ", "errors 0", "p50 ", "p99 "} {
			if !strings.Contains(l, part) {
				t.Errorf("progress line %q lacks %q", l, part)
			}
		}
		if strings.Contains(l, "\r") {
			t.Errorf("progress line %q has a \\r, but the output is not a terminal", l)
		}
	}
	last := lines[len(lines)-1]
	if want := "allowed " + strconv.FormatUint(s.Allowed, 10); !strings.Contains(last, want) {
		t.Errorf("last progress line %q does not show the final %q", last, want)
	}
}

func TestHTTPErrorStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unknown limiter", http.StatusNotFound)
	}))
	defer srv.Close()
	s, err := Run(t.Context(), Config{
		Target: HTTP, Addr: strings.TrimPrefix(srv.URL, "http://"), Concurrency: 1,
		Requests: 3, Duration: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := ErrorCount{Message: "HTTP 404: unknown limiter", Count: 3}
	if s.Errors != 3 || len(s.ErrorKinds) != 1 || s.ErrorKinds[0] != want {
		t.Errorf("errors %d %v, want 3 × %q", s.Errors, s.ErrorKinds, want.Message)
	}
	var b strings.Builder
	if err := s.Format(&b); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(s)
	if err != nil || !bytes.Contains(js, []byte(`"requests":3,"allowed":0,"denied":0,"fail_open":0,"fail_closed":0,"errors":3,`)) {
		t.Errorf("json.Marshal(summary) = %s, %v", js, err)
	}
	for _, part := range []string{"requests    3 in ", "errors 3 (100.0%)", "error       3 × HTTP 404: unknown limiter"} {
		if !strings.Contains(b.String(), part) {
			t.Errorf("summary lacks %q:\n%s", part, b.String())
		}
	}
}

func TestProgressOnATerminalRewritesOneLine(t *testing.T) {
	defer func(f func(io.Writer) bool) { isTerminal = f }(isTerminal)
	isTerminal = func(io.Writer) bool { return true }
	srv := checkServer(t, &every3rd{})
	var out bytes.Buffer
	_, err := Run(t.Context(), Config{
		Target: HTTP, Addr: srv.URL, Concurrency: 2, Duration: 250 * time.Millisecond,
		Progress: &out, ProgressInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if n := strings.Count(got, "\r"); n < 3 {
		t.Errorf("got %d carriage returns, want ≥ 3: %q", n, got)
	}
	if !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") != 1 {
		t.Errorf("want exactly one newline, at the end: %q", got)
	}
	if !strings.Contains(got, "\rdone ") {
		t.Errorf("no final line: %q", got)
	}
}
