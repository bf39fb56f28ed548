package envoy

import (
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Headers names the quota headers a Service adds to its answers
// (response_headers_to_add, which Envoy passes on to the client), as the
// reference service does when LIMIT_RESPONSE_HEADERS_ENABLED is set. They
// describe one descriptor of the request: the last one over its limit,
// else the first with the fewest units left among those with a limit. An
// answer in which no descriptor has a limit gets no headers.
type Headers struct {
	// Limit, Remaining and Reset name the headers that carry the
	// descriptor's requests_per_unit, its limit_remaining and the whole
	// seconds until its window resets. An empty name leaves that header
	// out; DefaultHeaders holds the reference service's names.
	Limit, Remaining, Reset string
	// IETF adds the pair of the IETF draft "RateLimit header fields for
	// HTTP": RateLimit-Policy ("name";q=limit;w=window seconds) and
	// RateLimit ("name";r=remaining;t=seconds to reset), named after the
	// limit's name, or "default".
	IETF bool
}

// DefaultHeaders are the reference service's header names.
var DefaultHeaders = Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// add sets msg's response_headers_to_add from its statuses.
func (h *Headers) add(msg *rlsv3.RateLimitResponse) {
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	for _, ds := range msg.Statuses {
		switch {
		case ds.CurrentLimit == nil:
		case ds.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			pick = ds
		case pick == nil || pick.Code != rlsv3.RateLimitResponse_OVER_LIMIT && ds.LimitRemaining < pick.LimitRemaining:
			pick = ds
		}
	}
	if pick == nil {
		return
	}
	limit := strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)
	remaining := strconv.FormatUint(uint64(pick.LimitRemaining), 10)
	reset := strconv.FormatInt(pick.DurationUntilReset.GetSeconds(), 10)
	var out []*corev3.HeaderValue
	for _, kv := range [][2]string{{h.Limit, limit}, {h.Remaining, remaining}, {h.Reset, reset}} {
		if kv[0] != "" {
			out = append(out, &corev3.HeaderValue{Key: kv[0], Value: kv[1]})
		}
	}
	if h.IETF {
		name := sfString(pick.CurrentLimit.Name)
		if w := windowSeconds(pick.CurrentLimit); w > 0 {
			out = append(out, &corev3.HeaderValue{Key: "RateLimit-Policy", Value: name + ";q=" + limit + ";w=" + strconv.FormatInt(w, 10)})
		}
		out = append(out, &corev3.HeaderValue{Key: "RateLimit", Value: name + ";r=" + remaining + ";t=" + reset})
	}
	msg.ResponseHeadersToAdd = out
}

// windowSeconds is the length of rl's window, or 0 when its unit is
// unknown.
func windowSeconds(rl *rlsv3.RateLimitResponse_RateLimit) int64 {
	return unitSeconds[rl.Unit] * int64(max(1, rl.GetUnitMultiplier().GetValue()))
}

// sfString writes name as a structured-field string (RFC 8941): quoted,
// with '"' and '\' escaped and other bytes outside printable ASCII
// replaced by '_'. An empty name is "default".
func sfString(name string) string {
	if name == "" {
		name = "default"
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
