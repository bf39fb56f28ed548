package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
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

// policy is what the headers say about one rule that does not change per
// request.
type policy struct {
	window int64  // w, in seconds; 0 omits it
	unit   string // qu; "" is the default ("requests")
	limit  int64  // the rule's own limit (before overrides)
	burst  int64  // the rule's own capacity (token bucket, GCRA)
	item   []byte // the whole item for that limit, preformatted
	// span is the rule's window of a token bucket or GCRA rule: its q is
	// the capacity and w the time the capacity takes to refill.
	span time.Duration
}

func policyOf(r floodgate.Rule) policy {
	switch {
	case r.Algorithm == floodgate.TokenBucket || r.Algorithm == floodgate.GCRA:
		return policy{span: r.Window}
	case r.Algorithm == floodgate.Concurrency:
		return policy{unit: "concurrent-requests"}
	case r.Algorithm == floodgate.FixedWindow && r.Align == floodgate.AlignDay:
		return policy{window: 86400}
	case r.Algorithm == floodgate.FixedWindow && r.Align == floodgate.AlignMonth:
		return policy{} // months differ in length: no fixed window to state
	}
	return policy{window: ceilSeconds(r.Window)}
}

// ceilSeconds rounds d up to whole seconds, at least 1.
func ceilSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// ceilSecondsOrZero rounds d up to whole seconds; 0 stays 0.
func ceilSecondsOrZero(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Quota formats a limiter's decisions as the values of the RateLimit-Policy
// and RateLimit fields, for transports other than this package's middleware
// (grpclimit sends them as metadata). It is safe for concurrent use.
type Quota struct {
	policies map[string]*policy
	// all is the RateLimit-Policy value when every rule applies with its
	// own limit, the common case, which then allocates nothing.
	all   string
	rules []floodgate.Rule
}

// NewQuota returns the formatter for decisions of l.
func NewQuota(l *floodgate.Limiter) *Quota {
	q := &Quota{policies: make(map[string]*policy)}
	var all []byte
	q.rules = l.Rules()
	for i, r := range q.rules {
		p := policyOf(r)
		p.limit, p.burst = r.Limit, r.Burst
		p.item = p.appendItem(nil, r.Name, r.Limit, r.Burst)
		q.policies[r.Name] = &p
		if i > 0 {
			all = append(all, ", "...)
		}
		all = append(all, p.item...)
	}
	q.all = string(all)
	return q
}

// Format returns the RateLimit-Policy and RateLimit values for d, one item
// per applied rule: "per-user";q=20;w=1 and "per-user";r=7;t=1. Both are ""
// when no rule applied.
func (q *Quota) Format(d *floodgate.Decision) (policy, limit string) {
	rules := d.Rules()
	if len(rules) == 0 {
		return "", ""
	}
	var buf [256]byte
	b := buf[:0]
	if q.allApply(rules) {
		policy = q.all
	} else {
		b = q.appendPolicy(b, rules)
		policy = string(b)
	}
	b = appendLimit(b[:0], rules)
	return policy, string(b)
}

// allApply reports whether rules are all of the limiter's rules, in order,
// each with its own limit.
func (q *Quota) allApply(rules []floodgate.RuleDecision) bool {
	if len(rules) != len(q.rules) {
		return false
	}
	for i := range rules {
		if rules[i].Name != q.rules[i].Name || rules[i].Limit != q.rules[i].Limit ||
			q.policies[rules[i].Name].span > 0 && rules[i].Capacity() != q.rules[i].Burst {
			return false
		}
	}
	return true
}

func (q *Quota) appendPolicy(b []byte, rules []floodgate.RuleDecision) []byte {
	for i := range rules {
		r := &rules[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		p := q.policies[r.Name]
		if p == nil { // not one of this limiter's rules
			continue
		}
		if r.Limit == p.limit && (p.span == 0 || r.Capacity() == p.burst) {
			b = append(b, p.item...)
		} else {
			b = p.appendItem(b, r.Name, r.Limit, r.Capacity())
		}
	}
	return b
}

// appendItem appends the policy item of a rule under limit. A token bucket
// or GCRA rule states its capacity as q (the most a client can use at
// once, so r <= q) and as w the time an empty bucket takes to refill it:
// 100/s with burst 200 is q=200;w=2, its refill rate q/w.
func (p *policy) appendItem(b []byte, name string, limit, capacity int64) []byte {
	b = appendName(b, name)
	b = append(b, ";q="...)
	window := p.window
	if p.span > 0 {
		b = strconv.AppendInt(b, capacity, 10)
		window = ceilSeconds(time.Duration(float64(p.span) * float64(capacity) / float64(limit)))
	} else {
		b = strconv.AppendInt(b, limit, 10)
	}
	if p.unit != "" {
		b = append(b, `;qu="`...)
		b = append(b, p.unit...)
		b = append(b, '"')
	}
	if window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, window, 10)
	}
	return b
}

func appendLimit(b []byte, rules []floodgate.RuleDecision) []byte {
	for i := range rules {
		r := &rules[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendName(b, r.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, max(r.Remaining, 0), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, resetSeconds(r), 10)
	}
	return b
}

// resetSeconds is a rule's t: the seconds until its quota is available
// again. For a rule that denied the request that is when the same request
// would be admitted, so that the binding rule's t and Retry-After name one
// instant (draft-ietf-httpapi-ratelimit-headers-11: the reset of a policy
// and Retry-After SHOULD reference the same point in time); otherwise the
// time until the quota is whole again.
func resetSeconds(r *floodgate.RuleDecision) int64 {
	if !r.Allowed && !r.Never && r.RetryAfter > 0 {
		return ceilSeconds(r.RetryAfter)
	}
	return ceilSecondsOrZero(r.ResetAfter)
}

// writeQuota adds the RateLimit-Policy and RateLimit items of every applied
// rule of d to h, after any a middleware further out has written.
func (m *Middleware) writeQuota(h http.Header, d *floodgate.Decision) {
	if pol, lim := m.quotaFmt.Format(d); pol != "" {
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
	if m.legacy {
		limit := d.Limit
		for _, r := range d.Rules() {
			if r.Name == d.Rule {
				limit = r.Capacity() // Remaining is never above it
			}
		}
		h[keyLimit] = []string{strconv.FormatInt(limit, 10)}
		h[keyRemaining] = []string{strconv.FormatInt(max(d.Remaining, 0), 10)}
		reset := m.clock.Now().Add(d.ResetAfter)
		secs := reset.Unix()
		if reset.Nanosecond() > 0 {
			secs++
		}
		h[keyReset] = []string{strconv.FormatInt(secs, 10)}
	}
}

// RetryAfterSeconds is the Retry-After value of a wait d: whole seconds,
// rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) int64 { return ceilSeconds(d) }

// appendName appends a rule name as a structured-field String. Rule names
// hold only letters, digits, '.', '_' and '-', so nothing needs escaping.
func appendName(b []byte, name string) []byte {
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"')
}

// writeDenied writes the default response to a request a rule denied.
func writeDenied(w http.ResponseWriter, d *floodgate.Decision) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	b := make([]byte, 0, 256)
	b = append(b, `{"type":"`+ProblemQuotaExceeded+`","title":"Too Many Requests","status":429,"detail":`...)
	if d.Never {
		b = append(b, `"the request costs more than the limit can ever admit"`...)
	} else {
		secs := ceilSeconds(d.RetryAfter)
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
	for _, r := range d.Rules() {
		if r.Allowed || r.Shadow {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		b = appendName(b, r.Name)
		n++
	}
	b = append(b, "]}\n"...)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(b)
}

// writeUnavailable writes the response to a request denied because the store
// failed under FailClosed.
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
