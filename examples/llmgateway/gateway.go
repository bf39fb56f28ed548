package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/gateway"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/store"
)

// The gateway's configuration. The numbers are small so that the README's
// walkthrough reaches every limit in a few requests.
var (
	// apiKeys maps each API key to its tenant.
	apiKeys = map[string]string{"key-alice": "alice", "key-bob": "bob"}

	// weights price the token classes: an output token costs three input
	// tokens.
	weights = gateway.Weights{"input": 1, "output": 3}

	keyRPM, keyTPM     int64 = 10, 80 // per API key, per minute
	primaryRPM         int64 = 3      // per route, per minute
	backupRPM          int64 = 10
	routeTPM           int64 = 1000
	monthlyBudget      int64 = 1000 // cost units per tenant and calendar month
	bobBudget          int64 = 20   // bob's plan
	budgetZone               = "America/New_York"
	upstreamNames            = []string{"primary", "backup"}
	upstreamRPMs             = []int64{primaryRPM, backupRPM}
	upstreamTimeout          = 10 * time.Second
	maxRequestBodySize int64 = 1 << 16
	// defaultMaxTokens is a request's max_tokens when it sets none: the
	// most output tokens the model may answer with.
	defaultMaxTokens int64 = 16
	// budgetHold is how long a request's reservation on the budget is
	// held unless settled: longer than the slowest answer, so that only a
	// gateway that died mid-request leaves it to lapse.
	budgetHold = 10 * time.Minute
)

// perMinute is a sliding window of limit units a minute in 1 s buckets.
func perMinute(name string, limit int64, key ...string) floodgate.Rule {
	return floodgate.Rule{Name: name, Algorithm: floodgate.SlidingWindow, Limit: limit, Window: time.Minute, Buckets: 60, Key: key}
}

// route is one upstream model behind the gateway.
type route struct {
	model  *model
	cand   gateway.Candidate  // its caps: rpm and tpm
	tokens *floodgate.Limiter // its tpm rule alone, for recording tokens
}

// llmGateway is an LLM gateway: it authenticates API keys, reserves the
// most a request can cost on the tenant's monthly budget, limits each key's
// requests and tokens per minute, answers repeated prompts from its cache,
// and otherwise sends the prompt to the first route with room, failing
// over when a route fails; then it settles the reservation with the cost.
type llmGateway struct {
	keys      *floodgate.Limiter // key-rpm and key-tpm
	keyTokens *floodgate.Limiter // key-tpm alone
	budget    *floodgate.Limiter // monthly budget per tenant, reservable
	routes    []*route
	client    *http.Client

	mu    sync.Mutex
	cache map[string]modelResponse // by prompt
}

// newGateway builds the gateway's limiters over store, reading clock, in
// front of models (in order of preference).
func newGateway(st store.Store, clock floodgate.Clock, models []*model) (*llmGateway, error) {
	zone, err := time.LoadLocation(budgetZone)
	if err != nil {
		return nil, err
	}
	opts := &floodgate.Options{Clock: clock}
	g := &llmGateway{client: &http.Client{Timeout: upstreamTimeout}, cache: map[string]modelResponse{}}
	if g.keys, err = floodgate.New("keys", st, []floodgate.Rule{
		perMinute("key-rpm", keyRPM, "key"),
		perMinute("key-tpm", keyTPM, "key"),
	}, opts); err != nil {
		return nil, err
	}
	if g.keyTokens, err = g.keys.Only("key-tpm"); err != nil {
		return nil, err
	}
	budget := gateway.MonthlyBudget("monthly", monthlyBudget, zone, "tenant")
	budget.Overrides = []floodgate.Override{{Match: floodgate.Attributes{"tenant": "bob"}, Limit: bobBudget}}
	// A budget that cannot be read refuses: spend is not left unguarded.
	if g.budget, err = floodgate.New("budget", st, []floodgate.Rule{budget},
		&floodgate.Options{Clock: clock, FailurePolicy: floodgate.FailClosed}); err != nil {
		return nil, err
	}
	for i, m := range models {
		l, err := floodgate.New("route-"+m.name, st, []floodgate.Rule{
			perMinute("rpm", upstreamRPMs[i], "route"),
			perMinute("tpm", routeTPM, "route"),
		}, opts)
		if err != nil {
			return nil, err
		}
		tokens, err := l.Only("tpm")
		if err != nil {
			return nil, err
		}
		g.routes = append(g.routes, &route{
			model:  m,
			cand:   gateway.Candidate{Name: m.name, Limiter: l, Attrs: floodgate.Attributes{"route": m.name}},
			tokens: tokens,
		})
	}
	return g, nil
}

// handler returns the gateway's routes.
func (g *llmGateway) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/complete", g.complete)
	mux.HandleFunc("GET /v1/usage", g.usage)
	mux.HandleFunc("POST /admin/upstreams/{name}/{action}", g.admin)
	return mux
}

// completion is the gateway's answer to POST /v1/complete.
type completion struct {
	Route  string           `json:"route,omitempty"`
	Cached bool             `json:"cached"`
	Text   string           `json:"text"`
	Usage  map[string]int64 `json:"usage"`
	Cost   int64            `json:"cost"`
	// Skipped lists the routes passed over as capped, with the caps hit;
	// FailedOver the routes tried that failed.
	Skipped    []string `json:"skipped,omitempty"`
	FailedOver []string `json:"failed_over,omitempty"`
	TokensLeft int64    `json:"tokens_left"`
	BudgetLeft int64    `json:"budget_left"`
}

// complete serves POST /v1/complete: {"prompt": "...", "max_tokens": n}
// with an API key in "Authorization: Bearer".
func (g *llmGateway) complete(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, tenant, ok := authenticate(r)
	if !ok {
		writeProblem(w, http.StatusUnauthorized, "Unauthorized", "a known API key is required", 0)
		return
	}
	var req completionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBodySize)).Decode(&req); err != nil || strings.TrimSpace(req.Prompt) == "" || req.MaxTokens < 0 {
		writeProblem(w, http.StatusBadRequest, "Bad request", `the body must be {"prompt": "...", "max_tokens": n}, max_tokens optional`, 0)
		return
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = defaultMaxTokens
	}
	keyAttrs := floodgate.Attributes{"key": key, "tenant": tenant}

	// 1. The budget: reserve the most the request can cost, its prompt's
	// tokens and max_tokens of output, so that requests answered at the
	// same time never spend more than the budget together. A refused
	// reservation holds nothing.
	most, err := weights.Cost(gateway.Usage{"input": int64(len(strings.Fields(req.Prompt))), "output": req.MaxTokens})
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "Bad request", err.Error(), 0)
		return
	}
	bd, _ := g.budget.Reserve(ctx, keyAttrs, most, budgetHold)
	if !bd.Allowed {
		switch {
		case bd.Reason == floodgate.ReasonStore:
			writeProblem(w, http.StatusServiceUnavailable, "Budget unavailable", "the budget cannot be read", bd.RetryAfter)
		case bd.Never:
			writeProblem(w, http.StatusTooManyRequests, "Over budget", fmt.Sprintf("this request may cost up to %d, more than tenant %s's monthly budget of %d", most, tenant, bd.Limit), 0)
		default:
			writeProblem(w, http.StatusTooManyRequests, "Budget spent", fmt.Sprintf("tenant %s has %d of its monthly budget of %d left, and this request may cost up to %d", tenant, bd.Remaining, bd.Limit, most), bd.RetryAfter)
		}
		return
	}
	bt := bd.Ticket()                // settles the reservation, or releases it
	ctx = context.WithoutCancel(ctx) // the accounting below outlives a client that hangs up
	// 2. The key's requests and tokens per minute: one decision that
	// counts the request (and holds one token unit until it is settled).
	kd, _ := g.keys.Decide(ctx, floodgate.ModeConsume, keyAttrs, 1)
	kt := kd.Ticket() // refunds or settles the admission
	if !kd.Allowed {
		g.budget.Release(ctx, bt)
		writeProblem(w, http.StatusTooManyRequests, "Rate limited", fmt.Sprintf("API key over its %s limit of %d a minute", kd.Rule, kd.Limit), kd.RetryAfter)
		return
	}

	// 3. The cache: a cached answer costs the key its tokens but uses no
	// route, so it is recorded against the key's rules and no route's. It
	// serves the request if it is no longer than its max_tokens.
	g.mu.Lock()
	resp, cached := g.cache[req.Prompt]
	g.mu.Unlock()
	cached = cached && resp.Usage["output"] <= req.MaxTokens
	out := completion{Cached: cached}
	var served *route
	var sel gateway.Selection
	if !cached {
		var status int
		var problem string
		served, resp, sel, status, problem = g.forward(ctx, req)
		out.Skipped, out.FailedOver = describe(sel)
		if served == nil {
			// Nothing was served: give the key its request back, and the
			// budget its reservation.
			g.keys.Refund(ctx, kt)
			g.budget.Release(ctx, bt)
			writeProblem(w, status, http.StatusText(status), problem, sel.RetryAfter)
			return
		}
		out.Route = served.model.name
		g.mu.Lock()
		g.cache[req.Prompt] = resp
		g.mu.Unlock()
	}

	// 4. Post-flight accounting, at the weighted cost of the tokens.
	cost, err := weights.Cost(resp.Usage)
	if err != nil {
		g.budget.Release(ctx, bt)
		writeProblem(w, http.StatusBadGateway, "Bad upstream answer", err.Error(), 0)
		return
	}
	td, _ := gateway.RecordUsage(ctx, g.keyTokens, kt, keyAttrs, cost)
	if served != nil {
		gateway.RecordUsage(ctx, served.tokens, sel.Ticket(), served.cand.Attrs, cost)
	}
	g.budget.Settle(ctx, bt, cost) // the reservation becomes the cost
	left, _ := g.budget.Peek(ctx, keyAttrs, 1)
	out.Text, out.Usage, out.Cost = resp.Text, resp.Usage, cost
	out.TokensLeft, out.BudgetLeft = td.Remaining, left.Remaining
	writeJSON(w, http.StatusOK, out)
}

// forward sends req to the first route with room, failing over to the next
// when one fails. It returns the route that answered, or nil with the
// status and detail of the failure.
func (g *llmGateway) forward(ctx context.Context, req completionRequest) (*route, modelResponse, gateway.Selection, int, string) {
	cands := make([]gateway.Candidate, len(g.routes))
	for i, rt := range g.routes {
		cands[i] = rt.cand
	}
	sel := gateway.NewSelector(cands)
	for {
		at, ok := sel.Next(ctx)
		if !ok {
			res := sel.Result()
			if res.Capped == len(cands) {
				return nil, modelResponse{}, res, http.StatusTooManyRequests, "every route is at its limit"
			}
			return nil, modelResponse{}, res, http.StatusBadGateway, "every route with room failed"
		}
		rt := g.routes[at.Index]
		resp, err := g.call(ctx, rt.model, req)
		if err != nil {
			sel.Failed(err)
			continue
		}
		return rt, resp, sel.Result(), http.StatusOK, ""
	}
}

// call sends req to model m.
func (g *llmGateway) call(ctx context.Context, m *model, req completionRequest) (modelResponse, error) {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, m.url+"/v1/complete", bytes.NewReader(body))
	if err != nil {
		return modelResponse{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	res, err := g.client.Do(hr)
	if err != nil {
		return modelResponse{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return modelResponse{}, fmt.Errorf("%s answered %s", m.name, res.Status)
	}
	var out modelResponse
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return modelResponse{}, fmt.Errorf("%s: %w", m.name, err)
	}
	return out, nil
}

// describe lists the routes a selection skipped (with the caps they hit)
// and those it tried that failed.
func describe(sel gateway.Selection) (skipped, failed []string) {
	for _, a := range sel.Attempts {
		switch {
		case !a.Admitted():
			skipped = append(skipped, a.Name+" ("+strings.Join(a.Caps, ", ")+")")
		case a.Err != nil:
			failed = append(failed, a.Name)
		}
	}
	return skipped, failed
}

// usageReport is the answer to GET /v1/usage.
type usageReport struct {
	RequestsLeft int64                  `json:"requests_left"`
	TokensLeft   int64                  `json:"tokens_left"`
	BudgetLeft   int64                  `json:"budget_left"`
	Routes       map[string]routeReport `json:"routes"`
}

type routeReport struct {
	RequestsLeft int64 `json:"requests_left"`
	TokensLeft   int64 `json:"tokens_left"`
}

// usage serves GET /v1/usage: what the caller's key, its tenant's budget
// and the routes have left, read without counting anything.
func (g *llmGateway) usage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, tenant, ok := authenticate(r)
	if !ok {
		writeProblem(w, http.StatusUnauthorized, "Unauthorized", "a known API key is required", 0)
		return
	}
	attrs := floodgate.Attributes{"key": key, "tenant": tenant}
	left := func(l *floodgate.Limiter, attrs floodgate.Attributes) map[string]int64 {
		d, _ := l.Decide(ctx, floodgate.ModePeek, attrs, 1)
		out := map[string]int64{}
		for _, rd := range d.Rules {
			out[rd.Name] = rd.Remaining
		}
		return out
	}
	k, b := left(g.keys, attrs), left(g.budget, attrs)
	rep := usageReport{RequestsLeft: k["key-rpm"], TokensLeft: k["key-tpm"], BudgetLeft: b["monthly"], Routes: map[string]routeReport{}}
	for _, rt := range g.routes {
		l := left(rt.cand.Limiter, rt.cand.Attrs)
		rep.Routes[rt.model.name] = routeReport{RequestsLeft: l["rpm"], TokensLeft: l["tpm"]}
	}
	writeJSON(w, http.StatusOK, rep)
}

// admin serves POST /admin/upstreams/{name}/fail and .../recover: it makes
// a fake model fail, or answer again. (A real gateway has no such thing;
// here it shows failover.)
func (g *llmGateway) admin(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	for _, rt := range g.routes {
		if rt.model.name != name {
			continue
		}
		switch action {
		case "fail", "recover":
			rt.model.failing.Store(action == "fail")
			writeJSON(w, http.StatusOK, map[string]any{"upstream": name, "failing": action == "fail"})
		default:
			writeProblem(w, http.StatusNotFound, "Not found", "the action is fail or recover", 0)
		}
		return
	}
	writeProblem(w, http.StatusNotFound, "Not found", "no upstream "+strconv.Quote(name), 0)
}

// authenticate returns the caller's API key and tenant.
func authenticate(r *http.Request) (key, tenant string, ok bool) {
	key, ok = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", "", false
	}
	tenant, ok = apiKeys[key]
	return key, tenant, ok
}

// problem is an RFC 9457 problem detail, with the retry-after in seconds.
type problem struct {
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, title, detail string, retry time.Duration) {
	p := problem{Title: title, Status: status, Detail: detail}
	if retry > 0 {
		p.RetryAfter = httplimit.RetryAfterSeconds(retry)
		w.Header().Set("Retry-After", strconv.FormatInt(p.RetryAfter, 10))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
