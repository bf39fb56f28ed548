package server

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/topkeys"
)

// kindUnknownRule is the problem of a request naming a rule its limiter
// does not have.
const kindUnknownRule = "unknown-rule"

// Defaults and limits of GET /v1/top.
const (
	defaultTopSpan = 5 * time.Minute
	defaultTopN    = 10
	maxTopN        = 100
)

// topResponse is GET /v1/top's answer.
type topResponse struct {
	Limiter string     `json:"limiter"`
	Kind    string     `json:"kind"`
	Span    string     `json:"span"`
	Since   time.Time  `json:"since"`
	Rules   []ruleTops `json:"rules"`
}

// ruleTops are one rule's top keys.
type ruleTops struct {
	Rule   string `json:"rule"`
	Limit  int64  `json:"limit"`
	Window string `json:"window,omitempty"`
	Shadow bool   `json:"shadow"`
	// Total is how many events of the kind the span counted, all keys.
	Total int64    `json:"total"`
	Keys  []topKey `json:"keys"`
}

// topKey is one key's counts over the span: the true count lies between
// count−error and count.
type topKey struct {
	Key            string `json:"key"`
	Denials        int64  `json:"denials"`
	DenialsError   int64  `json:"denials_error"`
	Decisions      int64  `json:"decisions"`
	DecisionsError int64  `json:"decisions_error"`
}

// handleTop serves GET /v1/top (admin): the keys of a limiter's rules with
// the most denials (kind=denials, the default) or decisions
// (kind=decisions) over the last span (default 5m, at most 15m). The
// limiter is one of the configuration's or an Envoy domain's
// ("envoy.edge").
func (s *Server) handleTop(w http.ResponseWriter, r *http.Request) *httpError {
	q := r.URL.Query()
	name := q.Get("limiter")
	if name == "" {
		return badRequest("limiter: must be set")
	}
	l, ok := s.observedLimiter(name)
	if !ok {
		return unknownLimiter("limiter", name)
	}
	span := defaultTopSpan
	if v := q.Get("span"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > topkeys.MaxSpan {
			return badRequest(fmt.Sprintf("span: want a duration of at most %v such as 1m, 5m or 15m, got %q", topkeys.MaxSpan, v))
		}
		span = wholeMinutes(d)
	}
	kind := topkeys.Denials
	switch v := q.Get("kind"); v {
	case "", "denials":
	case "decisions":
		kind = topkeys.Decisions
	default:
		return badRequest(fmt.Sprintf("kind: want denials or decisions, got %q", v))
	}
	n := defaultTopN
	if v := q.Get("n"); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 1 || i > maxTopN {
			return badRequest(fmt.Sprintf("n: want a number from 1 to %d, got %q", maxTopN, v))
		}
		n = i
	}
	var rules []floodgate.Rule
	if rule := q.Get("rule"); rule != "" {
		rl, ok := s.rule(l, rule)
		if !ok {
			return &httpError{status: http.StatusNotFound, kind: kindUnknownRule,
				detail: fmt.Sprintf("rule: limiter %q has no rule %q; GET /v1/limiters lists them", name, rule)}
		}
		rules = []floodgate.Rule{rl}
	} else {
		rules = l.rules
	}
	out := topResponse{Limiter: name, Kind: kind.String(), Span: span.String(), Rules: make([]ruleTops, 0, len(rules))}
	for _, rl := range rules {
		rt, since, err := s.topOf(name, rl, kind, span, n)
		if err != nil {
			return badRequest(err.Error())
		}
		out.Since = since
		out.Rules = append(out.Rules, rt)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// topOf returns rule's n top keys of kind over span, each with both kinds'
// counts.
func (s *Server) topOf(limiter string, rl floodgate.Rule, kind topkeys.Kind, span time.Duration, n int) (ruleTops, time.Time, error) {
	now := time.Now()
	if s.Clock != nil {
		now = s.Clock.Now()
	}
	rep, err := s.live.tops.TopAt(now, limiter, rl.Name, kind, span, n)
	if err != nil {
		return ruleTops{}, time.Time{}, err
	}
	out := ruleTops{Rule: s.ruleName(limiter, rl.Name), Limit: rl.Limit, Shadow: rl.Shadow, Total: rep.Total, Keys: make([]topKey, 0, len(rep.Entries))}
	if rl.Window > 0 && rl.Align != floodgate.AlignDay && rl.Align != floodgate.AlignMonth {
		out.Window = rl.Window.String()
	}
	other := topkeys.Decisions
	if kind == topkeys.Decisions {
		other = topkeys.Denials
	}
	for _, e := range rep.Entries {
		o, err := s.live.tops.CountAt(now, limiter, rl.Name, other, span, e.Key)
		if err != nil {
			return ruleTops{}, time.Time{}, err
		}
		k := topKey{Key: e.Key}
		if kind == topkeys.Denials {
			k.Denials, k.DenialsError, k.Decisions, k.DecisionsError = e.Count, e.Error, o.Count, o.Error
		} else {
			k.Decisions, k.DecisionsError, k.Denials, k.DenialsError = e.Count, e.Error, o.Count, o.Error
		}
		out.Keys = append(out.Keys, k)
	}
	return out, rep.Since.UTC(), nil
}

// wholeMinutes rounds a span up to whole minutes, as the top keys count
// it, so that the answer echoes the span it covers (90s is 2m).
func wholeMinutes(d time.Duration) time.Duration {
	return (d + time.Minute - 1).Truncate(time.Minute)
}
