// Package quota formats a limiter's per-rule results as the RateLimit-Policy
// and RateLimit fields of draft-ietf-httpapi-ratelimit-headers-11, for the
// HTTP middleware's headers and the gRPC interceptors' metadata alike.
package quota

import (
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Formatter formats the results of one limiter's rules. It is safe for
// concurrent use.
type Formatter struct {
	policies map[string]*policy
	// all is the RateLimit-Policy value when every rule applies with its
	// own limit, the common case, which then allocates nothing.
	all   string
	rules []floodgate.Rule
}

// policy is what the fields say about one rule that does not change per
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
	return policy{window: Seconds(r.Window)}
}

// Seconds rounds d up to whole seconds, at least 1: the Retry-After value
// of a wait, the w of a window.
func Seconds(d time.Duration) int64 {
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

// New returns the formatter of l's results.
func New(l *floodgate.Limiter) *Formatter {
	f := &Formatter{policies: make(map[string]*policy)}
	var all []byte
	f.rules = l.Rules()
	for i, r := range f.rules {
		p := policyOf(r)
		p.limit, p.burst = r.Limit, r.Burst
		p.item = p.appendItem(nil, r.Name, r.Limit, r.Burst)
		f.policies[r.Name] = &p
		if i > 0 {
			all = append(all, ", "...)
		}
		all = append(all, p.item...)
	}
	f.all = string(all)
	return f
}

// Fields returns the RateLimit-Policy and RateLimit values of rules (an
// Outcome's), one item per applied rule: "per-user";q=20;w=1 and
// "per-user";r=7;t=1. Both are "" when no rule applied.
func (f *Formatter) Fields(rules []floodgate.RuleDecision) (policy, limit string) {
	if len(rules) == 0 {
		return "", ""
	}
	var buf [256]byte
	b := buf[:0]
	if f.allApply(rules) {
		policy = f.all
	} else {
		b = f.appendPolicy(b, rules)
		policy = string(b)
	}
	b = appendLimit(b[:0], rules)
	return policy, string(b)
}

// allApply reports whether rules are all of the limiter's rules, in order,
// each with its own limit.
func (f *Formatter) allApply(rules []floodgate.RuleDecision) bool {
	if len(rules) != len(f.rules) {
		return false
	}
	for i := range rules {
		if rules[i].Name != f.rules[i].Name || rules[i].Limit != f.rules[i].Limit ||
			f.policies[rules[i].Name].span > 0 && rules[i].Capacity != f.rules[i].Burst {
			return false
		}
	}
	return true
}

func (f *Formatter) appendPolicy(b []byte, rules []floodgate.RuleDecision) []byte {
	for i := range rules {
		r := &rules[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		p := f.policies[r.Name]
		if p == nil { // not one of this limiter's rules
			continue
		}
		if r.Limit == p.limit && (p.span == 0 || r.Capacity == p.burst) {
			b = append(b, p.item...)
		} else {
			b = p.appendItem(b, r.Name, r.Limit, r.Capacity)
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
		window = Seconds(time.Duration(float64(p.span) * float64(capacity) / float64(limit)))
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
		return Seconds(r.RetryAfter)
	}
	return ceilSecondsOrZero(r.ResetAfter)
}

// appendName appends a rule name as a structured-field String. Rule names
// hold only letters, digits, '.', '_' and '-', so nothing needs escaping.
func appendName(b []byte, name string) []byte {
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"')
}
