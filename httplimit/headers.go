package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admission"
	"github.com/floodgate-go/floodgate/internal/quota"
)

// Response header names.
const (
	// HeaderRateLimitPolicy lists the quota policies applied to the request,
	// one structured-field item per rule: "per-user";q=20;w=1
	// (draft-ietf-httpapi-ratelimit-headers-11).
	HeaderRateLimitPolicy = "RateLimit-Policy"
	// HeaderRateLimit lists what is left of each policy:
	// "per-user";r=7;t=1.
	HeaderRateLimit = "RateLimit"
	// HeaderRetryAfter is the whole number of seconds, at least 1, after
	// which the denied request would be admitted.
	HeaderRetryAfter = "Retry-After"
	// HeaderLimit, HeaderRemaining and HeaderReset are the legacy headers
	// (Options.LegacyHeaders) for the binding rule; HeaderReset is in Unix
	// epoch seconds.
	HeaderLimit     = "X-RateLimit-Limit"
	HeaderRemaining = "X-RateLimit-Remaining"
	HeaderReset     = "X-RateLimit-Reset"
)

// Canonical forms of the header names, as keys of an http.Header (the wire
// is case-insensitive; http.Header.Get finds these).
var (
	keyPolicy    = http.CanonicalHeaderKey(HeaderRateLimitPolicy)
	keyRateLimit = http.CanonicalHeaderKey(HeaderRateLimit)
	keyLimit     = http.CanonicalHeaderKey(HeaderLimit)
	keyRemaining = http.CanonicalHeaderKey(HeaderRemaining)
	keyReset     = http.CanonicalHeaderKey(HeaderReset)
)

// ProblemQuotaExceeded is the RFC 9457 problem type of denied requests,
// registered by the RateLimit headers draft. The body's "violated-policies"
// member names the rules that denied.
const ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// writeQuota adds the RateLimit-Policy and RateLimit items of every applied
// rule of o to h, after any a middleware further out has written.
func (m *Middleware) writeQuota(h http.Header, o *floodgate.Outcome) {
	if pol, lim := m.quota.Fields(o.Rules); pol != "" {
		if len(h[keyPolicy]) == 0 && len(h[keyRateLimit]) == 0 {
			// One backing array for both fields: one allocation, not two.
			v := [...]string{pol, lim}
			vs := v[:]
			h[keyPolicy], h[keyRateLimit] = vs[0:1:1], vs[1:2:2]
		} else {
			h[keyPolicy] = append(h[keyPolicy], pol)
			h[keyRateLimit] = append(h[keyRateLimit], lim)
		}
	}
	if !m.legacy {
		return
	}
	limit := o.Limit
	for _, r := range o.Rules {
		if r.Name == o.Rule {
			limit = r.Capacity // Remaining is never above it
		}
	}
	h[keyLimit] = []string{strconv.FormatInt(limit, 10)}
	h[keyRemaining] = []string{strconv.FormatInt(max(o.Remaining, 0), 10)}
	reset := m.clock.Now().Add(o.ResetAfter)
	secs := reset.Unix()
	if reset.Nanosecond() > 0 {
		secs++
	}
	h[keyReset] = []string{strconv.FormatInt(secs, 10)}
}

// RetryAfterSeconds is the Retry-After value of a wait d: whole seconds,
// rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) int64 { return quota.Seconds(d) }

// writeDenied writes the default response to a request a rule denied.
func writeDenied(w http.ResponseWriter, a *admission.Admission) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	b := make([]byte, 0, 256)
	b = append(b, `{"type":"`+ProblemQuotaExceeded+`","title":"Too Many Requests","status":429,"detail":`...)
	if a.Outcome.Never {
		b = append(b, `"the request costs more than the limit can ever admit"`...)
	} else {
		secs := quota.Seconds(a.Outcome.RetryAfter)
		b = append(b, `"rate limit exceeded; retry after `...)
		b = strconv.AppendInt(b, secs, 10)
		if secs == 1 {
			b = append(b, ` second"`...)
		} else {
			b = append(b, ` seconds"`...)
		}
	}
	b = append(b, `,"violated-policies":[`...)
	n := 0
	a.Violated(func(name string, _ int64) {
		if n > 0 {
			b = append(b, ',')
		}
		// Rule names hold only letters, digits, '.', '_' and '-': a JSON
		// string needs no escaping.
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"')
		n++
	})
	b = append(b, "]}\n"...)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(b)
}

// writeUnavailable writes the response to a request denied because the store
// failed under FailClosed.
// writeInvalid answers 500 with a problem saying why the limiter could not
// decide the request: err, an error of the server's set-up (a key
// attribute no key function found), not of the client's request.
func writeInvalid(w http.ResponseWriter, err error) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	b := make([]byte, 0, 160)
	b = append(b, `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":`...)
	b = strconv.AppendQuote(b, "the rate limiter cannot decide this request: "+err.Error())
	b = append(b, "}\n"...)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusInternalServerError)
	w.Write(b)
}

func writeUnavailable(w http.ResponseWriter, status int) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	b := make([]byte, 0, 160)
	b = append(b, `{"type":"about:blank","title":`...)
	b = strconv.AppendQuote(b, http.StatusText(status))
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":"the rate limiter cannot decide; try again later"}`+"\n"...)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
