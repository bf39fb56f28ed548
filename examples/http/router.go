package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/go-chi/chi/v5"
)

type principal struct{ user, tenant string }

type principalKey struct{}

// tokens stands in for a real authentication service.
var tokens = map[string]principal{
	"alice-token": {"alice", "acme"},
	"bob-token":   {"bob", "acme"},
	"carol-token": {"carol", "globex"},
}

func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if !ok {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// authorise lets only acme into /api/reports.
func authorise(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.Context().Value(principalKey{}).(principal)
		if strings.HasPrefix(r.URL.Path, "/api/reports") && p.tenant != "acme" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func user(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p.user
}

func tenant(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p.tenant
}

// chiRoute keys on the route pattern chi matched. It is complete only in
// middlewares chi runs after routing, such as those added with With.
func chiRoute(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return r.Method + " " + rc.RoutePattern()
	}
	return ""
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// newRouter builds the API; clock is nil outside tests.
func newRouter(clock floodgate.Clock) http.Handler {
	store := memory.New(nil)
	opts := func(policy floodgate.FailurePolicy) *floodgate.Options {
		return &floodgate.Options{Clock: clock, FailurePolicy: policy}
	}
	public := must(httplimit.New(
		must(floodgate.New("public", store, []floodgate.Rule{{
			Name: "per-ip-route", Algorithm: floodgate.SlidingWindow, Limit: 60, Window: time.Minute,
			Key: []string{"route", "ip"},
		}}, opts(floodgate.FailOpen))),
		&httplimit.Options{Attributes: map[string]httplimit.KeyFunc{
			"ip":    httplimit.ClientIP(nil), // no proxy in front: the socket peer
			"route": chiRoute,
		}}))
	login := must(httplimit.New(
		must(floodgate.New("login", store, []floodgate.Rule{{
			Name: "failed-logins", Algorithm: floodgate.FixedWindow, Limit: 5, Window: 15 * time.Minute,
			Key: []string{"account", "ip"},
		}}, opts(floodgate.FailClosed))),
		&httplimit.Options{
			Attributes: map[string]httplimit.KeyFunc{
				"ip":      httplimit.ClientIP(nil),
				"account": func(r *http.Request) string { return r.FormValue("account") },
			},
			Count: httplimit.CountFailures,
		}))
	api := must(httplimit.New(
		must(floodgate.New("api", store, []floodgate.Rule{
			{Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 20, Window: time.Second, Burst: 40, Key: []string{"user"}},
			{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Minute, Key: []string{"tenant"}},
		}, opts(floodgate.FailOpen))),
		&httplimit.Options{Attributes: map[string]httplimit.KeyFunc{
			"user":   httplimit.FromContext(user),
			"tenant": httplimit.FromContext(tenant),
		}}))

	text := func(s string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, s) }
	}
	r := chi.NewRouter()
	r.With(public.Handler).Get("/prices", text("prices"))
	r.With(public.Handler).Get("/prices/{sku}", text("one price"))
	r.With(login.Handler).Post("/login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "open sesame" {
			http.Error(w, "wrong account or password", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome")
	})
	r.Route("/api", func(r chi.Router) {
		// authenticate → authorise → limit → handler
		r.Use(authenticate, authorise, api.Handler)
		r.Get("/orders", text("orders"))
		r.Get("/reports", text("reports"))
	})
	return r
}
