package httplimit

import (
	"context"
	"net/http"
	"strings"

	"github.com/floodgate-go/floodgate/clientip"
)

// A KeyFunc returns the value of one request attribute, such as the client's
// address or the caller's user id. "" means the request has no such
// attribute: the limiter's rules keyed on it are skipped for this request.
//
// A KeyFunc must be safe for concurrent use and must never trust what the
// client can write unless that is the point (an API key is only worth keying
// on after it has been authenticated).
type KeyFunc func(r *http.Request) string

var peerOnly = clientip.MustNew(nil)

// ClientIP keys on the client's address as res resolves it: the limiting key,
// in which IPv6 addresses are bucketed to a prefix. A nil res uses the socket
// peer only, ignoring every forwarded header. A request whose peer is not an
// IP address (a Unix socket) has no client IP: rules keyed on it are skipped.
func ClientIP(res *clientip.Resolver) KeyFunc {
	if res == nil {
		res = peerOnly
	}
	return func(r *http.Request) string { return res.Request(r).Key }
}

// Header keys on the value of the request header name (its first line), such
// as an API key. Use it only for headers that have been verified, or for
// limits where a client choosing its own key does no harm.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string {
		if v := r.Header[name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// FromContext keys on a value the application put in the request context,
// such as the user or tenant an authentication middleware established. Run
// the rate-limit middleware after that middleware, so the value is there.
func FromContext(f func(ctx context.Context) string) KeyFunc {
	return func(r *http.Request) string { return f(r.Context()) }
}

// Route keys on the pattern http.ServeMux matched ("POST /login"), from
// Request.Pattern. It is set only once the mux has routed the request, so
// wrap the route's handler, not the mux; MuxRoute works from outside.
func Route() KeyFunc {
	return func(r *http.Request) string { return r.Pattern }
}

// MuxRoute keys on the pattern mux would route the request to, for a
// middleware wrapped around the whole mux. Requests that match no pattern
// have no route.
func MuxRoute(mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) string {
		if r.Pattern != "" {
			return r.Pattern
		}
		_, p := mux.Handler(r)
		return p
	}
}

// Join keys on several values at once, for a composite attribute kept under
// one name ("tenant" and "user" as "acme:alice"). Values are escaped so that
// different tuples never join to the same key. If any part is "", so is the
// result. (A rule can also list several attributes in Rule.Key, which joins
// them the same way.)
func Join(parts ...KeyFunc) KeyFunc {
	return func(r *http.Request) string {
		var b strings.Builder
		for i, f := range parts {
			v := f(r)
			if v == "" {
				return ""
			}
			if i > 0 {
				b.WriteByte(':')
			}
			for j := 0; j < len(v); j++ {
				if v[j] == ':' || v[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(v[j])
			}
		}
		return b.String()
	}
}
