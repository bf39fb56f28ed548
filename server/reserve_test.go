package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// budgetConfig is an LLM gateway's: requests per minute and a daily budget
// of tokens per tenant, and a limiter without a reservable rule.
const budgetConfig = `
limiters:
  - name: llm
    rules:
      - {name: rpm, key: [tenant], algorithm: fixed_window, limit: 100, window: 1m}
      - {name: tokens, key: [tenant], algorithm: fixed_window, align: day, limit: 100000, reservable: true}
  - name: api
    rules:
      - {name: per-user, key: [user], algorithm: fixed_window, limit: 3, window: 1s}
`

// reserveBody asks for a reservation of units held for hold.
func reserveBody(tenant string, units int, hold string) string {
	return fmt.Sprintf(`{"limiter":"llm","attributes":{"tenant":%q},"reserve":{"units":%d,"hold":%q}}`, tenant, units, hold)
}

// settle posts a settlement and returns its answer.
func (ts *testServer) settle(ticket string, used int64) string {
	ts.t.Helper()
	code, _, b := ts.do("POST", "/v1/settle", fmt.Sprintf(`{"ticket":%q,"used":%d}`, ticket, used))
	var out SettleResponse
	if code != http.StatusOK || json.Unmarshal(b, &out) != nil {
		ts.t.Fatalf("POST /v1/settle: %d %s", code, b)
	}
	return out.Settlement
}

// tokensLeft peeks at tenant's budget.
func (ts *testServer) tokensLeft(tenant string) int64 {
	ts.t.Helper()
	d := ts.decide("/v1/check", `{"limiter":"llm","attributes":{"tenant":"`+tenant+`"},"cost":0}`)
	for _, r := range d.Rules {
		if r.Name == "tokens" {
			return r.Remaining
		}
	}
	ts.t.Fatalf("no tokens rule in %+v", d)
	return 0
}

// heldMetrics is what the reservations' metrics say of llm's tokens rule.
func (ts *testServer) heldMetrics(held, lapsed int, settlements string) {
	ts.t.Helper()
	want := fmt.Sprintf(`
# HELP floodgate_held_units Units held by the reservations this instance admitted, by limiter and rule, until they are settled or released through this instance or their hold time passes.
# TYPE floodgate_held_units gauge
floodgate_held_units{limiter="llm",rule="tokens"} %d
# HELP floodgate_holds_lapsed_total Holds of reservations this instance admitted that lapsed (their hold time passed) before a settlement or release through this instance ended them, by limiter and rule.
# TYPE floodgate_holds_lapsed_total counter
floodgate_holds_lapsed_total{limiter="llm",rule="tokens"} %d
`, held, lapsed)
	if err := testutil.GatherAndCompare(ts.reg, strings.NewReader(want), "floodgate_held_units", "floodgate_holds_lapsed_total"); err != nil {
		ts.t.Error(err)
	}
	var got []string
	for _, l := range []string{"settled", "lapsed", "already_settled", "failed"} {
		if n := testutil.ToFloat64(ts.metrics.settlements.WithLabelValues("llm", l)); n > 0 {
			got = append(got, fmt.Sprintf("%s=%g", l, n))
		}
	}
	if s := strings.Join(got, " "); s != settlements {
		ts.t.Errorf("floodgate_settlements_total{limiter=llm}: %s, want %s", s, settlements)
	}
}

// TestReserveAndSettle: a reservation through the HTTP API holds its units
// with the request's other rules and answers a ticket and when its holds
// lapse; settling charges the usage in the holds' place, once; a hold not
// settled lapses by itself at its time; used 0 and /v1/refund release. The
// metrics count the units held and the holds that lapsed.
func TestReserveAndSettle(t *testing.T) {
	ts := newTestServer(t, budgetConfig, nil, nil)
	d := ts.decide("/v1/check", reserveBody("acme", 8000, "10m"))
	if !d.Allowed || d.Ticket == "" || d.LapsesAfterMS != 600_000 || len(d.Rules) != 2 || d.Rules[0].Remaining != 99 || d.Rules[1].Remaining != 92_000 {
		t.Fatalf("reservation: %+v, want admitted, 8,000 held of the tokens, 1 request charged, a ticket lapsing in 10 minutes", d)
	}
	ts.heldMetrics(8000, 0, "")
	if code, _, b := ts.do("GET", "/v1/limiters", ""); code != 200 || !strings.Contains(string(b), `"align":"day","time_zone":"UTC","shadow":false,"reservable":true}`) {
		t.Errorf("GET /v1/limiters: %d %s, want the tokens rule marked reservable", code, b)
	}
	if got := ts.settle(d.Ticket, 5000); got != "settled" {
		t.Errorf("settle: %q, want settled", got)
	}
	if got := ts.tokensLeft("acme"); got != 95_000 {
		t.Errorf("after settling 5,000: %d left, want 95000", got)
	}
	if got := ts.settle(d.Ticket, 5000); got != "already_settled" {
		t.Errorf("settling twice: %q, want already_settled", got)
	}
	ts.heldMetrics(0, 0, "settled=1 already_settled=1")

	// A hold that is not settled lapses by itself; settled late, the usage
	// is charged all the same.
	d = ts.decide("/v1/check", reserveBody("acme", 8000, "1s"))
	if !d.Allowed || d.LapsesAfterMS != 1000 {
		t.Fatalf("a reservation held 1s: %+v", d)
	}
	ts.clock.Advance(2 * time.Second)
	if got := ts.tokensLeft("acme"); got != 95_000 {
		t.Errorf("after the hold lapsed: %d left, want 95000", got)
	}
	ts.heldMetrics(0, 1, "settled=1 already_settled=1")
	if got := ts.settle(d.Ticket, 3000); got != "lapsed" {
		t.Errorf("settling a lapsed hold: %q, want lapsed", got)
	}
	if got := ts.tokensLeft("acme"); got != 92_000 {
		t.Errorf("after settling 3,000 late: %d left, want 92000", got)
	}

	// Released with used 0, or by a refund of its ticket.
	for _, release := range []func(ticket string){
		func(ticket string) { ts.settle(ticket, 0) },
		func(ticket string) {
			if code, _, b := ts.do("POST", "/v1/refund", `{"ticket":"`+ticket+`"}`); code != http.StatusNoContent {
				t.Fatalf("refund: %d %s", code, b)
			}
		},
	} {
		d = ts.decide("/v1/check", reserveBody("acme", 8000, "10m"))
		if got := ts.tokensLeft("acme"); !d.Allowed || got != 84_000 {
			t.Fatalf("a reservation: %+v, %d left", d, got)
		}
		release(d.Ticket)
		if got := ts.tokensLeft("acme"); got != 92_000 {
			t.Errorf("after the release: %d left, want 92000", got)
		}
	}
	ts.heldMetrics(0, 1, "settled=2 lapsed=1 already_settled=1")

	// A reservation that does not fit is refused, charging nothing; one
	// larger than the budget never fits.
	d = ts.decide("/v1/check", reserveBody("acme", 92_001, "10m"))
	if d.Allowed || d.Ticket != "" || d.Rule != "tokens" || d.Never {
		t.Errorf("a reservation over what is left: %+v, want denied by tokens, no ticket", d)
	}
	if d = ts.decide("/v1/check", reserveBody("acme", 100_001, "10m")); d.Allowed || !d.Never {
		t.Errorf("a reservation over the budget: %+v, want never", d)
	}
	if got := ts.decide("/v1/check", `{"limiter":"llm","attributes":{"tenant":"acme"},"cost":0}`).Rules[0].Remaining; got != 96 {
		t.Errorf("requests left: %d, want 96: the refused reservations charged nothing", got)
	}

	// Near the day's end the holds lapse with the window.
	ts.clock.Set(time.Date(2026, 1, 2, 23, 55, 0, 0, time.UTC))
	if d = ts.decide("/v1/check", reserveBody("acme", 1000, "10m")); d.LapsesAfterMS != 300_000 {
		t.Errorf("a reservation 5 minutes before the day ends: lapses after %d ms, want 300000", d.LapsesAfterMS)
	}
}

// TestReserveBadInput: what a reservation or a settlement cannot be is a
// 400 (or 404) problem naming what is wrong, and changes nothing.
func TestReserveBadInput(t *testing.T) {
	ts := newTestServer(t, budgetConfig, nil, nil)
	check := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u1"}}`)
	reserved := ts.decide("/v1/check", reserveBody("acme", 10, "10m"))
	forged := reserved.Ticket[:len(reserved.Ticket)-2] + "AA"
	for _, tt := range []struct {
		path, body string
		status     int
		kind, want string
	}{
		{"/v1/check", `{"limiter":"api","attributes":{"user":"u1"},"reserve":{"units":10,"hold":"1m"}}`, 400, "invalid-request", `limiter "api" has no reservable rule`},
		{"/v1/check", `{"limiter":"nope","reserve":{"units":10,"hold":"1m"}}`, 404, "unknown-limiter", `no limiter named "nope"`},
		{"/v1/check", `{"limiter":"llm","reserve":{"hold":"1m"}}`, 400, "invalid-request", "reserve.units: must be set"},
		{"/v1/check", `{"limiter":"llm","reserve":{"units":0,"hold":"1m"}}`, 400, "invalid-request", "reserve.units: must be at least 1, got 0"},
		{"/v1/check", `{"limiter":"llm","reserve":{"units":-5,"hold":"1m"}}`, 400, "invalid-request", "reserve.units: must be at least 1, got -5"},
		{"/v1/check", `{"limiter":"llm","reserve":{"units":10}}`, 400, "invalid-request", "reserve.hold: must be set"},
		{"/v1/check", `{"limiter":"llm","reserve":{"units":10,"hold":"ten minutes"}}`, 400, "invalid-request", `reserve.hold: "ten minutes" is not a duration`},
		{"/v1/check", `{"limiter":"llm","reserve":{"units":10,"hold":600}}`, 400, "invalid-request", "reserve.hold: must be a string"},
		{"/v1/check", `{"limiter":"llm","reserve":{"units":10,"hold":"10us"}}`, 400, "invalid-request", "reserve.hold: must be at least 1ms, got 10µs"},
		{"/v1/check", `{"limiter":"llm","reserve":{"units":10,"hold":"1m","max":3}}`, 400, "invalid-request", `unknown field "reserve.max"`},
		{"/v1/check", `{"limiter":"llm","peek":true,"reserve":{"units":10,"hold":"1m"}}`, 400, "invalid-request", "reserve and peek: set one"},
		{"/v1/check", `{"limiter":"llm","cost":5,"reserve":{"units":10,"hold":"1m"}}`, 400, "invalid-request", "cost: a reservation charges the limiter's other rules 1 unit each"},
		{"/v1/settle", `{"used":1}`, 400, "invalid-request", "ticket: must be set"},
		{"/v1/settle", `{"ticket":"` + reserved.Ticket + `"}`, 400, "invalid-request", "used: must be set"},
		{"/v1/settle", `{"ticket":"` + reserved.Ticket + `","used":-1}`, 400, "invalid-request", "used: must not be negative, got -1"},
		{"/v1/settle", `{"ticket":"` + reserved.Ticket + `","used":1.5}`, 400, "invalid-request", "used: must be a whole number"},
		{"/v1/settle", `{"ticket":"` + forged + `","used":1}`, 400, "invalid-ticket", "ticket: the ticket is malformed, was not issued by this service, or was altered"},
		{"/v1/settle", `{"ticket":"` + check.Ticket + `","used":1}`, 400, "invalid-ticket", "ticket: not a reservation's; refund it with POST /v1/refund"},
		{"/v1/settle", `{"ticket":"` + reserved.Ticket + `","used":1,"cost":1}`, 400, "invalid-request", `unknown field "cost"`},
		{"/v1/settle", `{"ticket":"` + reserved.Ticket + `","used":1,"usage":{"input":1}}`, 400, "invalid-request", "used and usage: set one"},
		{"/v1/settle", `{"ticket":"` + reserved.Ticket + `","usage":{"input":1}}`, 400, "invalid-request", "usage: no token_classes are configured"},
	} {
		code, _, b := ts.do("POST", tt.path, tt.body)
		var p problem
		if err := json.Unmarshal(b, &p); err != nil || code != tt.status || p.Type != problemBase+tt.kind || !strings.Contains(p.Detail, tt.want) {
			t.Errorf("POST %s %s: %d %s, want %d %s containing %q", tt.path, tt.body, code, b, tt.status, tt.kind, tt.want)
		}
	}
	code, _, b := ts.do("POST", "/v1/reset", `{"limiter":"llm","attributes":{"tenant":"acme"},"reserve":{"units":10,"hold":"1m"}}`, "Authorization", "Bearer s3cret")
	if code != 400 || !strings.Contains(string(b), "reserve: only /v1/check reserves") {
		t.Errorf("reset with a reservation: %d %s", code, b)
	}
	if got := ts.tokensLeft("acme"); got != 100_000-10 {
		t.Errorf("%d tokens left, want 99990: a bad request changed something", got)
	}
	if got := ts.settle(reserved.Ticket, 4); got != "settled" {
		t.Errorf("the reservation, after the bad requests: %q, want settled", got)
	}
}

// A settlement may count tokens by class, at their weighted cost, as a
// record does.
func TestSettleUsage(t *testing.T) {
	ts := newTestServer(t, "token_classes: {input: 1, output: 3}\n"+budgetConfig, nil, nil)
	d := ts.decide("/v1/check", reserveBody("acme", 8000, "10m"))
	code, _, b := ts.do("POST", "/v1/settle", `{"ticket":"`+d.Ticket+`","usage":{"input":1200,"output":800}}`)
	if code != 200 || !strings.Contains(string(b), `"settled"`) {
		t.Fatalf("settle with usage: %d %s", code, b)
	}
	if got := ts.tokensLeft("acme"); got != 100_000-3600 {
		t.Errorf("%d left, want 96400: 1,200 input and 800 output tokens cost 3,600", got)
	}
	d = ts.decide("/v1/check", reserveBody("acme", 8000, "10m"))
	code, _, b = ts.do("POST", "/v1/settle", `{"ticket":"`+d.Ticket+`","usage":{"images":2}}`)
	if code != 400 || !strings.Contains(string(b), `usage: `) {
		t.Errorf("settle with an unknown token class: %d %s", code, b)
	}
}

// TestReservedBudgetOverHTTP is an LLM gateway's load through the HTTP
// API: 20 concurrent streams against a daily budget of 100,000 tokens,
// each reserving its max_tokens of 8,000 and settling what it used, 1,000
// to 8,000. The budget is never overspent, and is used to within a
// reservation of its end.
func TestReservedBudgetOverHTTP(t *testing.T) {
	ts := newTestServer(t, strings.Replace(budgetConfig, "limit: 100, window: 1m", "limit: 1000000, window: 1m", 1), nil, nil)
	res := reservedLoad(t, ts.url, "acme", 5*time.Second)
	res.check(t, ts.tokensLeft("acme"))
	ts.heldMetrics(0, 0, fmt.Sprintf("settled=%d", res.settled))
}

// budgetLoad is what a reservedLoad did.
type budgetLoad struct {
	spent, demanded int64
	settled         int
}

// reservedLoad runs 20 concurrent streams against tenant's budget through
// the HTTP API at url for at most d: each reserves 8,000 tokens held for a
// minute, streams a moment, and settles 1,000 to 8,000. A stream stops
// when it is refused while no stream holds a reservation: the budget left
// is then less than a reservation for good.
func reservedLoad(t *testing.T, url, tenant string, d time.Duration) budgetLoad {
	const streams, most = 20, 8000
	var (
		spent, demanded, settled atomic.Int64
		holding                  atomic.Int64 // streams with a reservation admitted and not yet settled
		wg                       sync.WaitGroup
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	defer client.CloseIdleConnections()
	post := func(path, body string, v any) bool {
		resp, err := client.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return false
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); resp.StatusCode != http.StatusOK || err != nil {
			t.Errorf("POST %s %s: %d %v", path, body, resp.StatusCode, err)
			return false
		}
		return true
	}
	deadline := time.Now().Add(d)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				var dec DecisionResponse
				if !post("/v1/check", reserveBody(tenant, most, "1m"), &dec) {
					return
				}
				used := 1000 + rand.Int64N(most-1000+1)
				demanded.Add(used)
				if !dec.Allowed {
					if holding.Load() == 0 {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				holding.Add(1)
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // the answer streams
				var st SettleResponse
				if !post("/v1/settle", fmt.Sprintf(`{"ticket":%q,"used":%d}`, dec.Ticket, used), &st) {
					return
				}
				if st.Settlement != "settled" {
					t.Errorf("settlement %q, want settled", st.Settlement)
					return
				}
				spent.Add(used)
				settled.Add(1)
				holding.Add(-1)
			}
		}()
	}
	wg.Wait()
	return budgetLoad{spent: spent.Load(), demanded: demanded.Load(), settled: int(settled.Load())}
}

// check asserts the budget held: never overspent, used to 90%, and the
// store's count is what was settled.
func (l budgetLoad) check(t *testing.T, left int64) {
	t.Helper()
	const budget = 100_000
	t.Logf("%d tokens demanded, %d spent of %d in %d answers", l.demanded, l.spent, budget, l.settled)
	switch {
	case t.Failed():
	case l.demanded <= budget:
		t.Fatalf("%d tokens demanded: the load did not exceed the budget", l.demanded)
	case l.spent > budget:
		t.Errorf("%d tokens spent, over the budget of %d", l.spent, budget)
	case l.spent < budget*9/10:
		t.Errorf("%d tokens spent, under 90%% of the budget of %d", l.spent, budget)
	case left != budget-l.spent:
		t.Errorf("the store has %d tokens left, want %d: the budget less what was spent", left, budget-l.spent)
	}
}

// aiBudget is an Envoy AI Gateway token budget that reserves 8,000 tokens
// at each check, held for a minute.
const aiBudget = `domain: ai
descriptors:
  - key: user_id
    rate_limit:
      unit: day
      requests_per_unit: 100000
      floodgate: {reserve: 8000, hold: 1m}
`

// TestEnvoyReservations: a reservable Envoy limit reserves at a check
// (hits_addend 0) and settles the oldest hold at a charge, through Envoy's
// API and POST /v1/check alike; the metrics count the holds.
func TestEnvoyReservations(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ai.yaml"), aiBudget)
	ts := openEnvoyOnly(t, dir)
	c := rlsv3.NewRateLimitServiceClient(dial(t, ts.GRPCAddress()))
	call := func(user string, hits uint64) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		d := &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user_id", Value: user}}, HitsAddend: wrapperspb.UInt64(hits)}
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0]
	}
	held := func(want int) {
		t.Helper()
		exp := fmt.Sprintf(`
# HELP floodgate_held_units Units held by the reservations this instance admitted, by limiter and rule, until they are settled or released through this instance or their hold time passes.
# TYPE floodgate_held_units gauge
floodgate_held_units{limiter="envoy.ai",rule="user_id"} %d
`, want)
		if err := testutil.GatherAndCompare(ts.reg, strings.NewReader(exp), "floodgate_held_units"); err != nil {
			t.Error(err)
		}
	}
	if st := call("ann", 0); st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 92_000 {
		t.Fatalf("first check: %v, want OK with 8,000 held", st)
	}
	if st := call("ann", 0); st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 84_000 {
		t.Fatalf("second check: %v, want OK with 16,000 held", st)
	}
	held(16_000)
	if st := call("ann", 3000); st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 89_000 {
		t.Errorf("a charge of 3,000: %v, want the oldest hold settled: 89,000 left", st)
	}
	held(8000)
	// POST /v1/check on the domain: cost 0 reserves, with a ticket that
	// /v1/settle settles; a cost settles the oldest hold.
	d := ts.decide("/v1/check", `{"limiter":"envoy.ai","attributes":{"user_id":"ann"},"cost":0}`)
	if !d.Allowed || d.Ticket == "" || d.LapsesAfterMS <= 0 || d.LapsesAfterMS > 60_000 || d.Remaining != 81_000 {
		t.Fatalf("POST /v1/check at cost 0: %+v, want a reservation of 8,000", d)
	}
	held(16_000)
	if got := ts.settle(d.Ticket, 1000); got != "settled" {
		t.Errorf("settling the domain's reservation: %q", got)
	}
	d = ts.decide("/v1/check", `{"limiter":"envoy.ai","attributes":{"user_id":"ann"},"cost":500}`)
	if !d.Allowed || d.Ticket != "" || d.Remaining != 95_500 {
		t.Errorf("POST /v1/check at cost 500: %+v, want the last hold settled with 500: 95,500 left", d)
	}
	held(0)
	if st := call("ann", 700); st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 94_800 {
		t.Errorf("a charge with no hold live: %v, want it charged alone: 94,800 left", st)
	}
	code, _, b := ts.do("POST", "/v1/check", `{"limiter":"envoy.ai","attributes":{"user_id":"ann"},"reserve":{"units":10,"hold":"1m"}}`)
	if code != 400 || !strings.Contains(string(b), "reserve as its file configures them") {
		t.Errorf("reserve on an Envoy domain's limiter: %d %s", code, b)
	}
	want := map[string]float64{"settled": 3, "lapsed": 1}
	for result, n := range want {
		if got := testutil.ToFloat64(ts.metrics.settlements.WithLabelValues("envoy.ai", result)); got != n {
			t.Errorf("floodgate_settlements_total{limiter=envoy.ai,result=%s} = %g, want %g", result, got, n)
		}
	}
}
