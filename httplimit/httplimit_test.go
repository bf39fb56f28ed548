package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

var epoch = time.Unix(1_800_000_000, 0)

type fixture struct {
	clock *clocktest.Manual
	store *memory.Store
	lim   *floodgate.Limiter
}

func newFixture(t testing.TB, rules []floodgate.Rule, opts *floodgate.Options) *fixture {
	t.Helper()
	f := &fixture{clock: clocktest.New(epoch), store: memory.New(&memory.Options{SweepInterval: -1})}
	t.Cleanup(func() { f.store.Close() })
	if opts == nil {
		opts = &floodgate.Options{}
	}
	opts.Clock = f.clock
	var err error
	if f.lim, err = floodgate.New("api", f.store, rules, opts); err != nil {
		t.Fatal(err)
	}
	return f
}

// serve starts a real HTTP server on loopback running h behind a middleware
// built from the fixture's limiter and opts.
func (f *fixture) serve(t testing.TB, opts *Options, h http.Handler) *httptest.Server {
	t.Helper()
	if opts == nil {
		opts = &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}}
	}
	if opts.Clock == nil {
		opts.Clock = f.clock
	}
	m, err := New(f.lim, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(h))
	t.Cleanup(srv.Close)
	return srv
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

type result struct {
	status int
	header http.Header
	body   string
}

func get(t testing.TB, url string, kv ...string) result {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{resp.StatusCode, resp.Header, string(b)}
}

func perIP(limit int64, window time.Duration) []floodgate.Rule {
	return []floodgate.Rule{{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: limit, Window: window, Key: []string{"ip"}}}
}

func TestDeniedAfterLimit(t *testing.T) {
	f := newFixture(t, perIP(2, 10*time.Second), nil)
	srv := f.serve(t, nil, ok)

	for i, wantR := range []string{"1", "0"} {
		res := get(t, srv.URL)
		if res.status != 200 || res.body != "ok" {
			t.Fatalf("request %d: %d %q", i, res.status, res.body)
		}
		if got, want := res.header.Get(HeaderRateLimitPolicy), `"per-ip";q=2;w=10`; got != want {
			t.Errorf("RateLimit-Policy = %q, want %q", got, want)
		}
		if got, want := res.header.Get(HeaderRateLimit), `"per-ip";r=`+wantR+`;t=10`; got != want {
			t.Errorf("RateLimit = %q, want %q", got, want)
		}
		if res.header.Get(HeaderRetryAfter) != "" {
			t.Errorf("Retry-After on an admitted request")
		}
	}
	f.clock.Advance(2500 * time.Millisecond)
	res := get(t, srv.URL)
	if got, want := res.status, http.StatusTooManyRequests; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	for name, want := range map[string]string{
		HeaderRetryAfter:      "8", // 7.5s rounded up
		"Cache-Control":       "no-store",
		"Content-Type":        "application/problem+json",
		HeaderRateLimitPolicy: `"per-ip";q=2;w=10`,
		HeaderRateLimit:       `"per-ip";r=0;t=8`,
	} {
		if got := res.header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	wantBody := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry after 8 seconds","violated-policies":["per-ip"]}` + "\n"
	if res.body != wantBody {
		t.Errorf("body = %s\nwant   %s", res.body, wantBody)
	}
	var problem struct {
		Type     string   `json:"type"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(res.body), &problem); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	if problem.Status != 429 || len(problem.Violated) != 1 {
		t.Errorf("problem = %+v", problem)
	}
}

// Without quota headers a denial still names every rule that denied:
// a one-rule limiter is asked with Allow, whose decision names its rule,
// a limiter of several rules with Decide.
func TestOmitQuotaHeadersNamesViolatedRules(t *testing.T) {
	rule := func(name string, limit int64, shadow bool) floodgate.Rule {
		return floodgate.Rule{Name: name, Algorithm: floodgate.FixedWindow, Limit: limit, Window: time.Minute, Key: []string{"ip"}, Shadow: shadow}
	}
	for _, tt := range []struct {
		name  string
		rules []floodgate.Rule
		want  string
	}{
		{"one rule", []floodgate.Rule{rule("per-ip", 1, false)}, `["per-ip"]`},
		{"both deny", []floodgate.Rule{rule("a", 1, false), rule("b", 1, false)}, `["a","b"]`},
		{"second denies", []floodgate.Rule{rule("a", 5, false), rule("b", 1, false)}, `["b"]`},
		{"shadow never", []floodgate.Rule{rule("s", 1, true), rule("e", 1, false)}, `["e"]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.rules, nil)
			srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, OmitQuotaHeaders: true}, ok)
			if res := get(t, srv.URL); res.status != 200 || res.header.Get(HeaderRateLimit) != "" {
				t.Fatalf("first: %d, RateLimit %q", res.status, res.header.Get(HeaderRateLimit))
			}
			res := get(t, srv.URL)
			if res.status != 429 || res.header.Get(HeaderRetryAfter) != "60" || res.header.Get(HeaderRateLimitPolicy) != "" {
				t.Errorf("second: %d, headers %v", res.status, res.header)
			}
			if !strings.Contains(res.body, `"violated-policies":`+tt.want+`}`) {
				t.Errorf("body %s, want violated-policies %s", res.body, tt.want)
			}
		})
	}
}

// The quota headers of a multi-rule limiter parse as RFC 9651 Lists, one
// item per applied rule, with integer parameters.
func TestQuotaHeadersAreStructuredFields(t *testing.T) {
	rules := []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 20, Window: time.Second, Burst: 40, Key: []string{"user"}},
		{Name: "per-tenant", Algorithm: floodgate.SlidingWindow, Limit: 1000, Window: time.Minute, Key: []string{"tenant"}},
		{Name: "daily", Algorithm: floodgate.FixedWindow, Limit: 50000, Align: floodgate.AlignDay, Key: []string{"tenant"}},
		{Name: "in-flight", Algorithm: floodgate.Concurrency, Limit: 4, Window: time.Minute, Key: []string{"user"}},
		{Name: "per-ip", Algorithm: floodgate.GCRA, Limit: 10, Window: 1500 * time.Millisecond, Key: []string{"ip"}},
	}
	f := newFixture(t, rules, nil)
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{
		"user":   Header("X-User"),
		"tenant": Header("X-Tenant"),
		"ip":     ClientIP(nil),
	}}, ok)
	res := get(t, srv.URL, "X-User", "alice", "X-Tenant", "acme")
	if res.status != 200 {
		t.Fatalf("status %d", res.status)
	}
	policies, err := parseSFList(res.header.Get(HeaderRateLimitPolicy))
	if err != nil {
		t.Fatal(err)
	}
	limits, err := parseSFList(res.header.Get(HeaderRateLimit))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name string
		q    int64
		w    any // int64 or nil
		qu   any
	}{
		{"per-user", 40, int64(2), nil}, // the capacity, refilled at 20/s in 2s
		{"per-tenant", 1000, int64(60), nil},
		{"daily", 50000, int64(86400), nil},
		{"in-flight", 4, nil, "concurrent-requests"},
		{"per-ip", 10, int64(2), nil}, // 1.5s rounded up
	}
	if len(policies) != len(want) || len(limits) != len(want) {
		t.Fatalf("got %d policies and %d limits, want %d:\n%s\n%s", len(policies), len(limits), len(want),
			res.header.Get(HeaderRateLimitPolicy), res.header.Get(HeaderRateLimit))
	}
	for i, w := range want {
		p, l := policies[i], limits[i]
		if p.value != w.name || l.value != w.name {
			t.Errorf("item %d names %v / %v, want %q", i, p.value, l.value, w.name)
		}
		if q, _ := p.param("q"); q != w.q {
			t.Errorf("%s: q = %v, want %d", w.name, q, w.q)
		}
		if got, _ := p.param("w"); got != w.w {
			t.Errorf("%s: w = %v, want %v", w.name, got, w.w)
		}
		if got, _ := p.param("qu"); got != w.qu {
			t.Errorf("%s: qu = %v, want %v", w.name, got, w.qu)
		}
		r, okR := l.param("r")
		tt, okT := l.param("t")
		if _, isInt := r.(int64); !okR || !isInt {
			t.Errorf("%s: r = %v", w.name, r)
		}
		if n, isInt := tt.(int64); !okT || !isInt || n < 0 {
			t.Errorf("%s: t = %v", w.name, tt)
		}
	}
	if r, _ := limits[0].param("r"); r != int64(39) {
		t.Errorf("per-user r = %v, want 39 (of q=40)", r)
	}

	// A rule whose attribute is missing is skipped, and so absent.
	res = get(t, srv.URL, "X-User", "bob")
	if got := res.header.Get(HeaderRateLimitPolicy); strings.Contains(got, "tenant") || strings.Contains(got, "daily") {
		t.Errorf("skipped rules listed: %s", got)
	}
}

// Retry-After is honest: retrying after exactly that many seconds passes,
// and it is never an underestimate.
func TestRetryAfterIsHonest(t *testing.T) {
	rules := []floodgate.Rule{{Name: "per-ip", Algorithm: floodgate.GCRA, Limit: 3, Window: 10 * time.Second, Key: []string{"ip"}}}
	f := newFixture(t, rules, nil)
	srv := f.serve(t, nil, ok)
	for range 3 {
		if res := get(t, srv.URL); res.status != 200 {
			t.Fatalf("status %d", res.status)
		}
	}
	for range 5 {
		res := get(t, srv.URL)
		if res.status != 429 {
			t.Fatalf("status %d, want 429", res.status)
		}
		secs, err := strconv.Atoi(res.header.Get(HeaderRetryAfter))
		if err != nil || secs < 1 {
			t.Fatalf("Retry-After = %q", res.header.Get(HeaderRetryAfter))
		}
		// One second less is always too early: the header rounds up.
		f.clock.Advance(time.Duration(secs-1) * time.Second)
		if res := get(t, srv.URL); res.status != 429 {
			t.Fatalf("retry %ds early passed", 1)
		}
		f.clock.Advance(time.Second)
		if res := get(t, srv.URL); res.status != 200 {
			t.Fatalf("retry after %ds: status %d", secs, res.status)
		}
	}
}

func TestCountFailuresOnly(t *testing.T) {
	f := newFixture(t, perIP(3, time.Minute), &floodgate.Options{FailurePolicy: floodgate.FailClosed})
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("password") != "right" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome")
	})
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, Count: CountFailures}, login)
	for range 10 {
		if res := get(t, srv.URL+"?password=right"); res.status != 200 {
			t.Fatalf("successful login: status %d", res.status)
		}
	}
	for i := range 3 {
		if res := get(t, srv.URL+"?password=wrong"); res.status != 401 {
			t.Fatalf("failure %d: status %d", i, res.status)
		}
	}
	if res := get(t, srv.URL+"?password=right"); res.status != 429 {
		t.Fatalf("after 3 failures: status %d, want 429", res.status)
	}
}

func TestCountSuccessesOnly(t *testing.T) {
	f := newFixture(t, perIP(2, time.Minute), nil)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("fail") {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		io.WriteString(w, "ok")
	})
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, Count: CountSuccesses}, h)
	for range 5 {
		if res := get(t, srv.URL+"?fail"); res.status != 502 {
			t.Fatalf("status %d", res.status)
		}
	}
	for range 2 {
		if res := get(t, srv.URL); res.status != 200 {
			t.Fatalf("status %d", res.status)
		}
	}
	if res := get(t, srv.URL); res.status != 429 {
		t.Fatalf("third success: status %d, want 429", res.status)
	}
}

// A batch endpoint runs its parts as marked sub-requests: the identity limit
// lets them through (the batch paid), the cost limit counts each part.
func TestSubrequestMark(t *testing.T) {
	idFix := newFixture(t, perIP(1, time.Minute), nil)
	costRules := []floodgate.Rule{{Name: "spend", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"ip"}}}
	costFix := newFixture(t, costRules, nil)
	attrs := map[string]KeyFunc{"ip": ClientIP(nil)}
	id, err := New(idFix.lim, &Options{Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	cost, err := New(costFix.lim, &Options{Attributes: attrs, Kind: Cost})
	if err != nil {
		t.Fatal(err)
	}
	part := id.Handler(cost.Handler(ok))
	mux := http.NewServeMux()
	mux.Handle("GET /part", part)
	mux.HandleFunc("GET /batch", func(w http.ResponseWriter, r *http.Request) {
		var codes []string
		for range 5 {
			rec := httptest.NewRecorder()
			sub := r.Clone(WithSubrequest(r.Context()))
			part.ServeHTTP(rec, sub)
			codes = append(codes, strconv.Itoa(rec.Code))
		}
		io.WriteString(w, strings.Join(codes, ","))
	})
	srv := httptest.NewServer(id.Handler(mux))
	t.Cleanup(srv.Close)

	res := get(t, srv.URL+"/batch", "X-Subrequest", "1")
	if res.status != 200 {
		t.Fatalf("batch: %d", res.status)
	}
	if got, want := res.body, "200,200,200,429,429"; got != want {
		t.Errorf("parts = %s, want %s (identity skipped, cost counted)", got, want)
	}
	// The outer request used the identity limit: a direct part, even one
	// claiming in a header to be a sub-request, is denied.
	if res := get(t, srv.URL+"/part", "X-Subrequest", "1"); res.status != 429 {
		t.Errorf("direct part: %d, want 429", res.status)
	}
}

// failingStore is a store that is down.
type failingStore struct{}

func (failingStore) Apply(context.Context, *store.Batch) error {
	return errors.New("connection refused")
}

func TestStoreFailure(t *testing.T) {
	for _, tt := range []struct {
		name   string
		policy floodgate.FailurePolicy
		status int // FailureStatus
		want   int
	}{
		{"closed", floodgate.FailClosed, 0, 503},
		{"closed as 429", floodgate.FailClosed, 429, 429},
		{"open", floodgate.FailOpen, 0, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := floodgate.New("api", failingStore{}, perIP(5, time.Second), &floodgate.Options{FailurePolicy: tt.policy, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(lim, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, FailureStatus: tt.status})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(m.Handler(ok))
			defer srv.Close()
			for range 3 { // the breaker opens on the way; the answer stays the same
				res := get(t, srv.URL)
				if res.status != tt.want {
					t.Fatalf("status %d, want %d", res.status, tt.want)
				}
				if res.header.Get(HeaderRateLimit) != "" || res.header.Get(HeaderRateLimitPolicy) != "" {
					t.Errorf("quota headers on a store failure")
				}
				if tt.want == 200 {
					if res.body != "ok" || res.header.Get(HeaderRetryAfter) != "" {
						t.Errorf("fail open: body %q, Retry-After %q", res.body, res.header.Get(HeaderRetryAfter))
					}
					continue
				}
				if n, err := strconv.Atoi(res.header.Get(HeaderRetryAfter)); err != nil || n < 1 {
					t.Errorf("Retry-After = %q", res.header.Get(HeaderRetryAfter))
				}
				if res.header.Get("Cache-Control") != "no-store" || res.header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("headers %v", res.header)
				}
				if !strings.Contains(res.body, `"status":`+strconv.Itoa(tt.want)) {
					t.Errorf("body %s", res.body)
				}
			}
		})
	}
}

func TestShadowNeverBlocks(t *testing.T) {
	f := newFixture(t, perIP(1, time.Minute), &floodgate.Options{Shadow: true})
	srv := f.serve(t, nil, ok)
	var last result
	for range 3 {
		if last = get(t, srv.URL); last.status != 200 {
			t.Fatalf("shadow limiter denied: %d", last.status)
		}
	}
	if got, want := last.header.Get(HeaderRateLimit), `"per-ip";r=0;t=60`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
}

func TestOnLimited(t *testing.T) {
	f := newFixture(t, perIP(1, time.Minute), nil)
	onLimited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := DecisionFrom(r.Context())
		if !ok {
			t.Error("no decision in the OnLimited context")
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "slow down, rule "+d.Rule)
	})
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, OnLimited: onLimited}, ok)
	get(t, srv.URL)
	res := get(t, srv.URL)
	if res.status != 429 || res.body != "slow down, rule per-ip" {
		t.Fatalf("%d %q", res.status, res.body)
	}
	if res.header.Get(HeaderRetryAfter) != "60" || res.header.Get(HeaderRateLimit) == "" {
		t.Errorf("headers not set before OnLimited: %v", res.header)
	}
}

// An LLM route is admitted while budget remains and charged the tokens it
// used once it has answered.
func TestChargeAfter(t *testing.T) {
	rules := []floodgate.Rule{{Name: "tokens", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute, Key: []string{"ip"}}}
	f := newFixture(t, rules, nil)
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !AddCost(r.Context(), 60) {
			t.Error("AddCost found no middleware")
		}
		io.WriteString(w, "completion")
	})
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, Kind: Cost, ChargeAfter: true}, llm)
	first := get(t, srv.URL)
	if first.status != 200 || first.header.Get(HeaderRateLimit) != `"tokens";r=100;t=0` {
		t.Fatalf("first: %d %q", first.status, first.header.Get(HeaderRateLimit))
	}
	if res := get(t, srv.URL); res.status != 200 { // 40 left: admitted, pushes usage to 120
		t.Fatalf("second: %d", res.status)
	}
	res := get(t, srv.URL)
	if res.status != 429 {
		t.Fatalf("third: %d, want 429", res.status)
	}
	if got := res.header.Get(HeaderRateLimit); !strings.HasPrefix(got, `"tokens";r=0;`) {
		t.Errorf("RateLimit = %q", got)
	}
	if AddCost(context.Background(), 1) {
		t.Error("AddCost outside a middleware reported true")
	}
}

// ChargeAfter over an in-flight cap plus a token budget: the handler holds
// its lease while it runs (an overlapping request is refused), and after it
// the lease is released and the tokens are charged to the budget alone.
func TestChargeAfterWithConcurrency(t *testing.T) {
	rules := []floodgate.Rule{
		{Name: "in-flight", Algorithm: floodgate.Concurrency, Limit: 1, Window: time.Minute, Key: []string{"ip"}},
		{Name: "tokens", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute, Key: []string{"ip"}},
	}
	f := newFixture(t, rules, nil)
	entered, finish := make(chan struct{}), make(chan struct{})
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-finish
		}
		AddCost(r.Context(), 30)
		io.WriteString(w, "completion")
	})
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, Kind: Cost, ChargeAfter: true}, llm)
	done := make(chan result)
	go func() { done <- get(t, srv.URL+"/slow") }()
	<-entered
	res := get(t, srv.URL)
	close(finish)
	if res.status != 429 || !strings.Contains(res.body, `["in-flight"]`) {
		t.Fatalf("overlapping request: %d %s, want 429 by in-flight", res.status, res.body)
	}
	if first := <-done; first.status != 200 {
		t.Fatalf("first: %d", first.status)
	}
	ip := floodgate.Attributes{"ip": "127.0.0.1"}
	o, err := f.lim.Decide(context.Background(), floodgate.ModePeek, ip, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range o.Rules {
		want := map[string]int64{"in-flight": 1, "tokens": 70}[r.Name]
		if r.Remaining != want {
			t.Errorf("after the request: %s has %d left, want %d (lease released, 30 tokens charged)", r.Name, r.Remaining, want)
		}
	}
	res = get(t, srv.URL) // the slot is free again
	if res.status != 200 {
		t.Fatalf("next request: %d %s", res.status, res.body)
	}
	if got := res.header.Values(HeaderRateLimit); len(got) != 2 || got[0] != `"tokens";r=70;t=60` || got[1] != `"in-flight";r=0;t=60` {
		t.Errorf("RateLimit = %q", got)
	}
}

func TestLegacyHeaders(t *testing.T) {
	f := newFixture(t, perIP(5, 30*time.Second), nil)
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, LegacyHeaders: true}, ok)
	f.clock.Advance(250 * time.Millisecond)
	res := get(t, srv.URL)
	want := map[string]string{
		HeaderLimit:     "5",
		HeaderRemaining: "4",
		HeaderReset:     strconv.FormatInt(epoch.Add(250*time.Millisecond+30*time.Second).Unix()+1, 10),
	}
	for k, v := range want {
		if got := res.header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestConcurrencyLeaseReleased(t *testing.T) {
	rules := []floodgate.Rule{
		{Name: "in-flight", Algorithm: floodgate.Concurrency, Limit: 1, Window: time.Minute, Key: []string{"ip"}},
		{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"ip"}},
	}
	f := newFixture(t, rules, nil)
	srv := f.serve(t, nil, ok)
	for i := range 3 {
		if res := get(t, srv.URL); res.status != 200 {
			t.Fatalf("request %d: %d (lease not released?)", i, res.status)
		}
	}
	// The lease was released each time, but the rate rule kept its count.
	if res := get(t, srv.URL); res.status != 429 || !strings.Contains(res.body, `["per-ip"]`) {
		t.Fatalf("fourth: %d %s", res.status, res.body)
	}
}

// Per-route limits in one limiter: the route is an attribute, and an
// override gives the login route its own, lower limit.
func TestPerRouteOverride(t *testing.T) {
	rules := []floodgate.Rule{{
		Name: "per-route", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute,
		Key:       []string{"route", "ip"},
		Overrides: []floodgate.Override{{Match: floodgate.Attributes{"route": "POST /login"}, Limit: 1}},
	}}
	f := newFixture(t, rules, nil)
	mux := http.NewServeMux()
	mux.Handle("POST /login", ok)
	mux.Handle("GET /items/{id}", ok)
	m, err := New(f.lim, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil), "route": MuxRoute(mux)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(mux))
	defer srv.Close()
	post := func() int {
		resp, err := http.Post(srv.URL+"/login", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := post(), post(); a != 200 || b != 429 {
		t.Fatalf("login: %d then %d", a, b)
	}
	res := get(t, srv.URL+"/items/1")
	if res.status != 200 || res.header.Get(HeaderRateLimitPolicy) != `"per-route";q=100;w=60` {
		t.Fatalf("items: %d %q", res.status, res.header.Get(HeaderRateLimitPolicy))
	}
	// Different ids share the route's bucket.
	if res := get(t, srv.URL+"/items/2"); res.header.Get(HeaderRateLimit) != `"per-route";r=98;t=60` {
		t.Errorf("RateLimit = %q", res.header.Get(HeaderRateLimit))
	}
	// An unrouted path has no route: the rule is skipped.
	if res := get(t, srv.URL+"/nowhere"); res.status != 404 || res.header.Get(HeaderRateLimit) != "" {
		t.Errorf("unrouted: %d %q", res.status, res.header.Get(HeaderRateLimit))
	}
}

func TestRouteFromServeMux(t *testing.T) {
	req := httptest.NewRequest("GET", "/items/7", nil)
	var got string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) { got = Route()(r) })
	mux.ServeHTTP(httptest.NewRecorder(), req)
	if got != "GET /items/{id}" {
		t.Errorf("Route = %q", got)
	}
}

func TestJoinEscapes(t *testing.T) {
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("A", "x:y")
	req.Header.Set("B", "z")
	req.Header.Set("C", "x")
	req.Header.Set("D", "y:z")
	ab := Join(Header("A"), Header("B"))(req)
	cd := Join(Header("C"), Header("D"))(req)
	if ab == cd {
		t.Errorf("Join collided: %q", ab)
	}
	if got := Join(Header("A"), Header("Missing"))(req); got != "" {
		t.Errorf("Join with a missing part = %q", got)
	}
}

func TestNewErrors(t *testing.T) {
	f := newFixture(t, perIP(1, time.Second), nil)
	ipOnly := map[string]KeyFunc{"ip": ClientIP(nil)}
	for _, tt := range []struct {
		lim  *floodgate.Limiter
		opts *Options
		want string
	}{
		{nil, &Options{}, "limiter must not be nil"},
		{f.lim, nil, `rule "per-ip" is keyed on attribute "ip"`},
		{f.lim, &Options{Attributes: map[string]KeyFunc{"ip": nil}}, `attribute "ip": KeyFunc must not be nil`},
		{f.lim, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil), "": Header("X")}}, "attribute name must not be empty"},
		{f.lim, &Options{Attributes: ipOnly, FailureStatus: 500}, "FailureStatus must be 503 or 429"},
		{f.lim, &Options{Attributes: ipOnly, Count: 7}, "unknown Count"},
		{f.lim, &Options{Attributes: ipOnly, Kind: 9}, "unknown Kind"},
		{f.lim, &Options{Attributes: ipOnly, ChargeAfter: true, Count: CountFailures}, "cannot be combined"},
		{f.lim, &Options{Attributes: ipOnly, LegacyHeaders: true, OmitQuotaHeaders: true}, "set one of them"},
	} {
		_, err := New(tt.lim, tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New: %v, want error containing %q", err, tt.want)
		}
	}
}

// A client that sends its own forwarding headers cannot change its bucket,
// and a thousand different spoofed addresses create no new key. One limiter
// holds a rule per header the server might be configured to read.
func TestSpoofedHeadersShareOneBucket(t *testing.T) {
	var rules []floodgate.Rule
	attrs := map[string]KeyFunc{}
	for _, header := range []string{clientip.HeaderXForwardedFor, clientip.HeaderForwarded, clientip.HeaderXRealIP} {
		// The server trusts proxies in 10.0.0.0/8; the test client on
		// loopback is not one of them.
		res := clientip.MustNew(&clientip.Options{
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			Header:         header,
		})
		rules = append(rules, floodgate.Rule{Name: "via-" + header, Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Minute, Key: []string{header}})
		attrs[header] = ClientIP(res)
	}
	f := newFixture(t, rules, nil)
	srv := f.serve(t, &Options{Attributes: attrs}, ok)
	client := srv.Client()
	for i := range 1000 {
		spoof := netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}).String()
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Forwarded-For", spoof)
		req.Header.Set("Forwarded", "for="+spoof)
		req.Header.Set("X-Real-IP", spoof)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if n := f.store.Len(); n != len(rules) {
		t.Errorf("store holds %d keys after 1000 spoofed requests, want %d (one per rule)", n, len(rules))
	}
	res := get(t, srv.URL)
	if res.status != 429 {
		t.Errorf("request 1001: %d, want 429 (all spoofed requests in one bucket)", res.status)
	}
	if !strings.Contains(res.body, `"via-X-Forwarded-For","via-Forwarded","via-X-Real-IP"`) {
		t.Errorf("violated policies: %s", res.body)
	}
}

// Behind a trusted proxy the forwarded client counts, the left-most
// (client-written) entries do not, and IPv6 clients in one /64 share a
// bucket.
func TestTrustedProxyAndIPv6Buckets(t *testing.T) {
	f := newFixture(t, perIP(2, time.Minute), nil)
	res := clientip.MustNew(&clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(res)}}, ok)
	xff := "X-Forwarded-For"
	if r := get(t, srv.URL, xff, "2001:db8:1:2::1"); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := get(t, srv.URL, xff, "6.6.6.6, 2001:db8:1:2:ffff::9"); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := get(t, srv.URL, xff, "7.7.7.7", xff, "[2001:db8:1:2::3]:5000"); r.status != 429 {
		t.Fatalf("third address in the same /64: %d, want 429", r.status)
	}
	if r := get(t, srv.URL, xff, "2001:db8:1:3::1"); r.status != 200 {
		t.Fatalf("next /64: %d, want 200", r.status)
	}
	if n := f.store.Len(); n != 2 {
		t.Errorf("store holds %d keys, want 2", n)
	}
}

// IPv6 clients connecting directly over ::1 are keyed by their /64.
func TestIPv6Peer(t *testing.T) {
	f := newFixture(t, perIP(1, time.Minute), nil)
	m, err := New(f.lim, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(m.Handler(ok))
	l, err := listenV6()
	if err != nil {
		t.Skip("no IPv6 loopback:", err)
	}
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	get(t, srv.URL)
	if r := get(t, srv.URL); r.status != 429 {
		t.Fatalf("second request: %d", r.status)
	}
	got := m.Attributes(&http.Request{RemoteAddr: "[::1]:1234"})["ip"]
	if got != "::/64" {
		t.Errorf("key of ::1 = %q, want ::/64", got)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func listenV6() (net.Listener, error) { return net.Listen("tcp6", "[::1]:0") }

// The figures a client reads are consistent: a token bucket states its
// capacity as the quota (r <= q, w the time to refill it), and a denied
// request's t names the same instant as Retry-After, for buckets and
// sliding windows alike.
func TestQuotaFiguresAgree(t *testing.T) {
	rules := []floodgate.Rule{{Name: "b", Algorithm: floodgate.TokenBucket, Limit: 100, Burst: 200, Window: time.Second, Key: []string{"ip"}}}
	f := newFixture(t, rules, nil)
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, LegacyHeaders: true}, ok)
	res := get(t, srv.URL)
	if got := res.header.Get(HeaderRateLimitPolicy); got != `"b";q=200;w=2` {
		t.Errorf("policy %q, want q=200;w=2", got)
	}
	if got := res.header.Get(HeaderRateLimit); got != `"b";r=199;t=1` {
		t.Errorf("RateLimit %q", got)
	}
	if got := res.header.Get(HeaderLimit); got != "200" {
		t.Errorf("X-RateLimit-Limit %q, want 200 (the capacity)", got)
	}

	for _, r := range []floodgate.Rule{
		{Name: "tb", Algorithm: floodgate.TokenBucket, Limit: 1, Burst: 6, Window: time.Second, Key: []string{"ip"}},
		{Name: "sw", Algorithm: floodgate.SlidingWindow, Limit: 6, Window: 8 * time.Second, Buckets: 8, Key: []string{"ip"}},
	} {
		f := newFixture(t, []floodgate.Rule{r}, nil)
		srv := f.serve(t, nil, ok)
		for range 6 {
			get(t, srv.URL)
			f.clock.Advance(100 * time.Millisecond)
		}
		res := get(t, srv.URL)
		retry := res.header.Get(HeaderRetryAfter)
		if res.status != 429 || retry == "" || res.header.Get(HeaderRateLimit) != `"`+r.Name+`";r=0;t=`+retry {
			t.Errorf("%s denied: %d Retry-After %q RateLimit %q, want t equal to Retry-After", r.Name, res.status, retry, res.header.Get(HeaderRateLimit))
		}
	}
}

// A limiter that requires every key answers a request without one 500,
// saying which rule lacked its key, and the handler does not run: the
// middleware runs before the key is known (say, before authentication).
func TestMissingKeyIsAServerError(t *testing.T) {
	f := newFixture(t, []floodgate.Rule{{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute, Key: []string{"user"}}},
		&floodgate.Options{RequireKeys: true})
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"user": Header("X-User")}}, ok)
	r := get(t, srv.URL)
	if r.status != http.StatusInternalServerError || r.header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(r.body, `per-user`) || strings.Contains(r.body, "ok") {
		t.Errorf("no X-User: %d %q %s, want a 500 problem naming per-user", r.status, r.header.Get("Content-Type"), r.body)
	}
	if r := get(t, srv.URL, "X-User", "ann"); r.status != http.StatusOK {
		t.Errorf("with X-User: %d %s", r.status, r.body)
	}
}
