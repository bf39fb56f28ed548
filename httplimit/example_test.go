package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/store/memory"
)

// send serves one request from addr and prints the status and the headers
// a client would look at.
func send(h http.Handler, method, target, addr string, header ...string) {
	req := httptest.NewRequest(method, target, nil)
	req.RemoteAddr = addr
	for i := 0; i < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(strings.TrimSpace(fmt.Sprint(rec.Code, " ", rec.Header().Get("RateLimit"), " ", rec.Header().Get("Retry-After"))))
}

// A public route limited per client address: 2 requests a minute per IP,
// with the load balancer in 10.0.0.0/8 trusted to say who the client is.
func Example_perIP() {
	clock := newExampleClock(time.Unix(1_800_000_000, 0))
	lim, _ := floodgate.New("public", memory.New(nil), []floodgate.Rule{
		{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"ip"}},
	}, &floodgate.Options{Clock: clock})
	ips := clientip.MustNew(&clientip.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	})
	mw, err := httplimit.New(lim, &httplimit.Options{
		Attributes: map[string]httplimit.KeyFunc{"ip": httplimit.ClientIP(ips)},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /prices", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "prices")
	})))

	send(mux, "GET", "/prices", "10.0.0.1:5000", "X-Forwarded-For", "198.51.100.7")
	send(mux, "GET", "/prices", "10.0.0.2:5000", "X-Forwarded-For", "6.6.6.6, 198.51.100.7")
	send(mux, "GET", "/prices", "10.0.0.1:5000", "X-Forwarded-For", "198.51.100.7")
	send(mux, "GET", "/prices", "10.0.0.1:5000", "X-Forwarded-For", "198.51.100.8")
	// Output:
	// 200 "per-ip";r=1;t=60
	// 200 "per-ip";r=0;t=60
	// 429 "per-ip";r=0;t=60 60
	// 200 "per-ip";r=1;t=60
}

type userKey struct{}

type user struct{ id, tenant string }

// An authenticated API limited per user and per tenant, both in one limiter
// so the two are charged together or not at all. The middleware runs after
// authentication (the user is known) and after the access check (a refused
// request never counts).
func Example_perUserAndTenant() {
	clock := newExampleClock(time.Unix(1_800_000_000, 0))
	lim, _ := floodgate.New("api", memory.New(nil), []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 2, Window: time.Second, Key: []string{"user"}},
		{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"tenant"}},
	}, &floodgate.Options{Clock: clock})
	limit, err := httplimit.New(lim, &httplimit.Options{Attributes: map[string]httplimit.KeyFunc{
		"user":   httplimit.FromContext(func(ctx context.Context) string { u, _ := ctx.Value(userKey{}).(user); return u.id }),
		"tenant": httplimit.FromContext(func(ctx context.Context) string { u, _ := ctx.Value(userKey{}).(user); return u.tenant }),
	}})
	if err != nil {
		panic(err)
	}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tokens := map[string]user{"t-alice": {"alice", "acme"}, "t-bob": {"bob", "acme"}}
			u, ok := tokens[r.Header.Get("Authorization")]
			if !ok {
				http.Error(w, "who are you?", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
		})
	}
	authorise := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Context().Value(userKey{}).(user); r.URL.Path == "/admin" && u.id != "alice" {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := authenticate(authorise(limit.Handler(app)))

	send(h, "GET", "/admin", "192.0.2.1:1", "Authorization", "t-bob") // refused: counts nothing
	send(h, "GET", "/orders", "192.0.2.1:1", "Authorization", "t-alice")
	send(h, "GET", "/orders", "192.0.2.1:1", "Authorization", "t-bob")
	send(h, "GET", "/orders", "192.0.2.1:1", "Authorization", "t-alice")
	send(h, "GET", "/orders", "192.0.2.1:1", "Authorization", "t-bob") // the tenant's quota is spent
	// Output:
	// 403
	// 200 "per-user";r=1;t=1, "per-tenant";r=2;t=60
	// 200 "per-user";r=1;t=1, "per-tenant";r=1;t=60
	// 200 "per-user";r=0;t=1, "per-tenant";r=0;t=60
	// 429 "per-user";r=1;t=1, "per-tenant";r=0;t=60 60
}

// A login limit that counts failed attempts only: five wrong passwords per
// account and address in 15 minutes, while users who get their password
// right are never locked out. The limiter fails closed: if its store is
// down, logins wait rather than go unguarded.
func Example_loginFailuresOnly() {
	clock := newExampleClock(time.Unix(1_800_000_000, 0))
	lim, _ := floodgate.New("login", memory.New(nil), []floodgate.Rule{
		{Name: "failed-logins", Algorithm: floodgate.FixedWindow, Limit: 2, Window: 15 * time.Minute, Key: []string{"account", "ip"}},
	}, &floodgate.Options{Clock: clock, FailurePolicy: floodgate.FailClosed})
	mw, err := httplimit.New(lim, &httplimit.Options{
		Attributes: map[string]httplimit.KeyFunc{
			"account": func(r *http.Request) string { return r.FormValue("account") },
			"ip":      httplimit.ClientIP(nil),
		},
		Count: httplimit.CountFailures, // 4xx and 5xx answers count; the rest are refunded
	})
	if err != nil {
		panic(err)
	}
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "correct horse" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome")
	})
	h := mw.Handler(login)

	send(h, "POST", "/login?account=ann&password=correct+horse", "192.0.2.1:1")
	send(h, "POST", "/login?account=ann&password=correct+horse", "192.0.2.1:1")
	send(h, "POST", "/login?account=ann&password=guess1", "192.0.2.1:1")
	send(h, "POST", "/login?account=ann&password=guess2", "192.0.2.1:1")
	send(h, "POST", "/login?account=ann&password=correct+horse", "192.0.2.1:1")
	// Output:
	// 200 "failed-logins";r=1;t=900
	// 200 "failed-logins";r=1;t=900
	// 401 "failed-logins";r=1;t=900
	// 401 "failed-logins";r=0;t=900
	// 429 "failed-logins";r=0;t=900 900
}

// An LLM route charged by the tokens it used, known only once the response
// is done: a request is admitted while the user has budget left and
// charged afterwards (Limiter.Record), so a long answer can overdraw the
// budget and the next request waits until the window rolls. A Cost
// middleware also charges sub-requests marked with WithSubrequest.
func Example_llmTokens() {
	clock := newExampleClock(time.Unix(1_800_000_000, 0))
	lim, _ := floodgate.New("llm", memory.New(nil), []floodgate.Rule{
		{Name: "tokens-per-minute", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Minute, Key: []string{"user"}},
	}, &floodgate.Options{Clock: clock})
	mw, err := httplimit.New(lim, &httplimit.Options{
		Attributes:  map[string]httplimit.KeyFunc{"user": httplimit.Header("X-User")}, // set by the authentication gateway
		Kind:        httplimit.Cost,
		ChargeAfter: true,
	})
	if err != nil {
		panic(err)
	}
	complete := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := int64(700) // prompt + completion tokens, from the model's answer
		io.WriteString(w, "…")
		httplimit.AddCost(r.Context(), used)
	})
	h := mw.Handler(complete)

	send(h, "POST", "/v1/complete", "192.0.2.1:1", "X-User", "ann")
	send(h, "POST", "/v1/complete", "192.0.2.1:1", "X-User", "ann")
	send(h, "POST", "/v1/complete", "192.0.2.1:1", "X-User", "ann")
	clock.Advance(time.Minute)
	send(h, "POST", "/v1/complete", "192.0.2.1:1", "X-User", "ann")
	// Output:
	// 200 "tokens-per-minute";r=1000;t=0
	// 200 "tokens-per-minute";r=300;t=60
	// 429 "tokens-per-minute";r=0;t=60 60
	// 200 "tokens-per-minute";r=1000;t=0
}

// An LLM route that keeps a daily token budget exactly: each request
// reserves its max_tokens before the model runs and, when the handler
// returns, its reservation is settled with the tokens it reported with
// AddCost. Requests that stream at the same time each see what the others
// hold, so together they never spend more than the budget; a request whose
// reservation does not fit is refused until the day ends.
func Example_llmBudget() {
	clock := newExampleClock(time.Unix(1_800_000_000, 0)) // 08:00 UTC
	lim, _ := floodgate.New("llm", memory.New(nil), []floodgate.Rule{
		{Name: "tokens-per-day", Algorithm: floodgate.FixedWindow, Limit: 10_000, Align: floodgate.AlignDay, Key: []string{"user"}, Reservable: true},
	}, &floodgate.Options{Clock: clock})
	mw, err := httplimit.New(lim, &httplimit.Options{
		Attributes: map[string]httplimit.KeyFunc{"user": httplimit.Header("X-User")}, // set by the authentication gateway
		Kind:       httplimit.Cost,
		// The most a request can use: its max_tokens.
		Reserve: func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.URL.Query().Get("max_tokens"), 10, 64)
			return n
		},
		Hold: 10 * time.Minute, // longer than the slowest answer
	})
	if err != nil {
		panic(err)
	}
	complete := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "…")
		httplimit.AddCost(r.Context(), 3000) // the tokens the answer used
	})
	h := mw.Handler(complete)

	send(h, "POST", "/v1/complete?max_tokens=4000", "192.0.2.1:1", "X-User", "ann") // 4,000 held, then 3,000 spent
	send(h, "POST", "/v1/complete?max_tokens=4000", "192.0.2.1:1", "X-User", "ann")
	send(h, "POST", "/v1/complete?max_tokens=4000", "192.0.2.1:1", "X-User", "ann") // 4,000 left: it fits
	send(h, "POST", "/v1/complete?max_tokens=4000", "192.0.2.1:1", "X-User", "ann") // 1,000 left
	// Output:
	// 200 "tokens-per-day";r=6000;t=57600
	// 200 "tokens-per-day";r=3000;t=57600
	// 200 "tokens-per-day";r=0;t=57600
	// 429 "tokens-per-day";r=1000;t=57600 57600
}

// exampleClock is a Clock that moves only when Advance moves it, so the
// examples' output is exact; a real limiter leaves Options.Clock nil and
// reads the system clock.
type exampleClock struct{ ns atomic.Int64 }

func newExampleClock(t time.Time) *exampleClock {
	c := &exampleClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *exampleClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func (c *exampleClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
