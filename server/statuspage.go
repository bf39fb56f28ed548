package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/topkeys"
)

// statusPath is where the status page is served.
const statusPath = "/status/"

//go:embed statusui
var statusUI embed.FS

// statusFiles are the page's assets: its HTML, script and style, and uPlot
// (scripts/fetch-uplot.sh copies it from npm).
var statusFiles = func() http.Handler {
	sub, err := fs.Sub(statusUI, "statusui")
	if err != nil {
		panic(err)
	}
	return http.StripPrefix(statusPath, http.FileServerFS(sub))
}()

// handleStatusPage serves the status page under /status/ (admin): the page
// and its assets, and /status/data, what the page shows as JSON.
func (s *Server) handleStatusPage(w http.ResponseWriter, r *http.Request) *httpError {
	if r.URL.Path == statusPath+"data" {
		return s.handleStatusData(w, r)
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
	statusFiles.ServeHTTP(w, r)
	return nil
}

// statusData is GET /status/data's answer.
type statusData struct {
	Now      time.Time       `json:"now"`
	Config   configStatus    `json:"config"`
	Results  []string        `json:"results"`
	Seconds  int             `json:"seconds"`
	Span     string          `json:"span"`
	Limiters []statusLimiter `json:"limiters"`
}

type statusLimiter struct {
	Name string `json:"name"`
	// EnvoyDomain is the Envoy domain the limiter serves, "" for one of
	// the configuration's limiters.
	EnvoyDomain   string `json:"envoy_domain,omitempty"`
	FailurePolicy string `json:"failure_policy"`
	Shadow        bool   `json:"shadow"`
	Breaker       string `json:"breaker"`
	// Rates start at Start (Unix seconds), one count per second and
	// result, in the order of statusData.Results.
	Start int64          `json:"start"`
	Rates [][]int64      `json:"rates"`
	Rules []statusRuleOf `json:"rules"`
}

type statusRuleOf struct {
	ruleTops
	Algorithm string   `json:"algorithm"`
	Key       []string `json:"key"`
}

// handleStatusData serves GET /status/data: per limiter (the
// configuration's, then the Envoy domains'), the last rateSeconds seconds
// of decisions by result, the breaker, and each rule with its top denied
// keys over span (default 5m).
func (s *Server) handleStatusData(w http.ResponseWriter, r *http.Request) *httpError {
	span := defaultTopSpan
	if v := r.URL.Query().Get("span"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > topkeys.MaxSpan {
			return badRequest("span: want a duration of at most 15m such as 1m, 5m or 15m")
		}
		span = wholeMinutes(d)
	}
	now := time.Now()
	out := statusData{
		Now:      now.UTC(),
		Config:   s.configStatus(),
		Results:  results[:],
		Seconds:  rateSeconds,
		Span:     span.String(),
		Limiters: []statusLimiter{}, // a list, even when nothing is configured
	}
	for _, l := range s.observed() {
		series := s.live.rates.series(l.Name(), now.Unix(), rateSeconds)
		sl := statusLimiter{
			Name:          l.Name(),
			EnvoyDomain:   l.domain,
			FailurePolicy: l.FailurePolicy().String(),
			Shadow:        l.Shadow(),
			Breaker:       l.Breaker().String(),
			Start:         now.Unix() - rateSeconds,
			Rates:         series[:],
			Rules:         []statusRuleOf{},
		}
		for _, rl := range l.rules {
			rt, _, err := s.topOf(l.Name(), rl, topkeys.Denials, span, defaultTopN)
			if err != nil {
				return badRequest(err.Error())
			}
			key := rl.Key
			if key == nil {
				key = []string{}
			}
			sl.Rules = append(sl.Rules, statusRuleOf{ruleTops: rt, Algorithm: rl.Algorithm.String(), Key: key})
		}
		out.Limiters = append(out.Limiters, sl)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// adminPage guards the status page like admin, and also takes the token as
// the password of HTTP Basic authentication (any user name), so that a
// browser can open the page: it asks for the password, then sends it with
// the page's own requests. A refusal asked for as HTML (a browser opening
// the page) is a short page that says why; the page's data requests get
// problem+json.
func (s *Server) adminPage(h func(http.ResponseWriter, *http.Request) *httpError) func(http.ResponseWriter, *http.Request) *httpError {
	bearer := s.admin(h)
	want := sha256.Sum256([]byte(s.AdminToken))
	return func(w http.ResponseWriter, r *http.Request) *httpError {
		e := func() *httpError {
			_, pass, basic := r.BasicAuth()
			if basic && s.AdminToken != "" {
				got := sha256.Sum256([]byte(pass))
				if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
					return h(w, r)
				}
			}
			if scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " "); strings.EqualFold(scheme, "Bearer") || s.AdminToken == "" {
				return bearer(w, r)
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="floodgate status (password: the admin token)", charset="UTF-8"`)
			detail := "the status page needs the admin token, as a bearer token or as the password of basic authentication"
			if basic {
				detail = "the password is not the admin token"
			}
			return &httpError{status: http.StatusUnauthorized, kind: kindUnauthorized, detail: detail}
		}()
		if e != nil && (e.status == http.StatusUnauthorized || e.status == http.StatusForbidden) && wantsHTML(r) {
			writeProblemPage(w, e)
			return nil
		}
		return e
	}
}

// wantsHTML reports whether r asks for an HTML answer: a browser
// navigating to the page, not a script fetching its data.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// problemPage is the HTML form of a refused status page request.
var problemPage = template.Must(template.New("problem").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>floodgate status: {{.Title}}</title></head>
<body><h1>{{.Status}} {{.Title}}</h1><p>{{.Detail}}.</p></body></html>
`))

// writeProblemPage answers with e as a short HTML page.
func writeProblemPage(w http.ResponseWriter, e *httpError) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'")
	w.WriteHeader(e.status)
	problemPage.Execute(w, problem{Title: http.StatusText(e.status), Status: e.status, Detail: e.detail})
}
