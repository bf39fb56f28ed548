// Package clientip finds the address of the client behind a request, for
// rate limiting and audit logs, without letting the client choose it.
//
// By default a Resolver believes only the socket peer: a client that sends
// its own X-Forwarded-For, Forwarded or X-Real-IP header changes nothing.
// Forwarded headers are honoured only when the peer is a configured trusted
// proxy (a list of CIDR prefixes) or when the deployment declares a fixed
// number of proxy hops. Addresses are then read from the right, the side
// that trusted proxies append to, skipping trusted proxies, and the first
// address that is not a trusted proxy is the client. The left-most address
// is never believed just because it is left-most: anyone can write it.
//
// Every address is normalised (ports and brackets stripped, IPv4-mapped IPv6
// unmapped, zones dropped). A header whose relevant entry is malformed,
// obfuscated ("_hidden"), "unknown" or unspecified is not usable: the
// Resolver falls back to the peer and counts the fallback.
//
// A Client carries both the full address, for audit logs, and the key to
// limit on, in which IPv6 addresses are bucketed to a prefix (/64 by
// default): one host usually holds a whole /64, so limiting single IPv6
// addresses would let it mint buckets at will.
package clientip

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
)

// Header names the resolver reads from.
const (
	HeaderXForwardedFor = "X-Forwarded-For"
	HeaderForwarded     = "Forwarded"
	HeaderXRealIP       = "X-Real-IP"
)

// DefaultIPv6Prefix is the prefix length IPv6 clients are bucketed to when
// Options.IPv6Prefix is 0.
const DefaultIPv6Prefix = 64

// Headers is where forwarded addresses are read from. http.Header satisfies
// it; Values must return every line of the named header, in order.
type Headers interface {
	Values(name string) []string
}

// Options configure a Resolver. The zero value trusts no proxy: the client is
// always the socket peer.
type Options struct {
	// TrustedProxies are the prefixes of the proxies in front of the
	// server. A forwarded header is read only when the socket peer is in
	// one of them, and addresses in them are skipped when walking the
	// header from the right.
	TrustedProxies []netip.Prefix
	// TrustedHops, as an alternative to TrustedProxies, says that every
	// request reaches the server through exactly this many proxies, the
	// nearest being the socket peer. The client is then the TrustedHops-th
	// address from the right of X-Forwarded-For (or Forwarded). A request
	// carrying fewer addresses falls back to the peer. Use it only when no
	// request can bypass the proxies.
	TrustedHops int
	// Header selects the header read from trusted proxies:
	// HeaderXForwardedFor (the default), HeaderForwarded (RFC 7239), or the
	// name of a single-address header such as HeaderXRealIP, which the
	// nearest proxy must overwrite. A single-address header is used only
	// when named here.
	Header string
	// IPv6Prefix is the prefix length IPv6 keys are bucketed to, 1 to 128;
	// 0 means DefaultIPv6Prefix. IPv4 keys are whole addresses.
	IPv6Prefix int
	// OnFallback, when set, is called each time a trusted proxy's header
	// was unusable and the peer was used instead, with the header's name
	// and the reason. It must be safe for concurrent use.
	OnFallback func(header string, reason error)
}

// Resolver finds clients' addresses. It is safe for concurrent use; its
// configuration is fixed by New.
type Resolver struct {
	trusted    []netip.Prefix
	hops       int
	header     string
	kind       headerKind
	v6bits     int
	onFallback func(string, error)
	fallbacks  atomic.Uint64
}

type headerKind uint8

const (
	kindXFF headerKind = iota
	kindForwarded
	kindSingle
)

// Client is a resolved client address.
type Client struct {
	// Addr is the client's full, normalised address, for audit logs.
	Addr netip.Addr
	// Key is the address to limit on: the IPv4 address, or the IPv6
	// address's prefix in CIDR notation ("2001:db8::/64"). It is "" only
	// when the peer itself is not an IP address.
	Key string
	// Forwarded reports that Addr came from a trusted proxy's header rather
	// than from the socket peer.
	Forwarded bool
}

// Errors passed to Options.OnFallback.
var (
	// ErrMalformed: the header does not parse.
	ErrMalformed = errors.New("clientip: malformed header")
	// ErrUnusable: the entry that names the client is "unknown", obfuscated,
	// unspecified, or otherwise not an address a client can have.
	ErrUnusable = errors.New("clientip: unusable address")
	// ErrTooFewHops: the header holds fewer addresses than TrustedHops needs.
	ErrTooFewHops = errors.New("clientip: fewer forwarded addresses than trusted hops")
)

// New returns a Resolver with the given options (nil trusts no proxy).
func New(opts *Options) (*Resolver, error) {
	if opts == nil {
		opts = &Options{}
	}
	r := &Resolver{hops: opts.TrustedHops, v6bits: opts.IPv6Prefix, onFallback: opts.OnFallback}
	if r.hops < 0 {
		return nil, fmt.Errorf("clientip: TrustedHops must not be negative, got %d", r.hops)
	}
	if r.hops > 0 && len(opts.TrustedProxies) > 0 {
		return nil, errors.New("clientip: set TrustedProxies or TrustedHops, not both")
	}
	for i, p := range opts.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("clientip: TrustedProxies[%d] is not a valid prefix", i)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		r.trusted = append(r.trusted, p.Masked())
	}
	if r.v6bits == 0 {
		r.v6bits = DefaultIPv6Prefix
	}
	if r.v6bits < 1 || r.v6bits > 128 {
		return nil, fmt.Errorf("clientip: IPv6Prefix must be between 1 and 128, got %d", r.v6bits)
	}
	r.header = http.CanonicalHeaderKey(opts.Header)
	switch r.header {
	case "", HeaderXForwardedFor:
		r.header, r.kind = HeaderXForwardedFor, kindXFF
	case HeaderForwarded:
		r.kind = kindForwarded
	default:
		if !validToken(r.header) {
			return nil, fmt.Errorf("clientip: Header %q is not a valid header name", opts.Header)
		}
		r.kind = kindSingle
	}
	return r, nil
}

// MustNew is like New but panics on a configuration error; for package-level
// variables with constant options.
func MustNew(opts *Options) *Resolver {
	r, err := New(opts)
	if err != nil {
		panic(err)
	}
	return r
}

// Fallbacks returns how many times a trusted proxy's header was unusable and
// the peer was used instead.
func (r *Resolver) Fallbacks() uint64 { return r.fallbacks.Load() }

// Header returns the name of the header the resolver reads from trusted
// proxies.
func (r *Resolver) Header() string { return r.header }

// Request resolves the client of an HTTP request from its RemoteAddr and
// headers.
func (r *Resolver) Request(req *http.Request) Client {
	peer, _ := ParseAddr(req.RemoteAddr)
	// A plain IPv4 peer's key is its address exactly as RemoteAddr spells
	// it (netip accepts only the canonical dotted form): reuse those bytes
	// rather than formatting them again.
	host := req.RemoteAddr
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	plain := peer.Is4() && dotted(host)
	c := r.resolve(peer, req.Header, plain)
	if plain && c.Key == "" && c.Addr.IsValid() {
		c.Key = host
	}
	return c
}

// dotted reports whether s holds only digits and dots.
func dotted(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '.' && (s[i] < '0' || s[i] > '9') {
			return false
		}
	}
	return s != ""
}

// Resolve resolves the client of a request that arrived from the socket peer
// peer carrying headers h (h may be nil). An invalid peer yields a Client
// with an empty Key.
func (r *Resolver) Resolve(peer netip.Addr, h Headers) Client {
	return r.resolve(peer, h, false)
}

// resolve resolves the client. With lazyPeerKey, a result that is the peer
// is returned with an empty Key, for the caller to fill in.
func (r *Resolver) resolve(peer netip.Addr, h Headers, lazyPeerKey bool) Client {
	peer = normalise(peer)
	if !peer.IsValid() {
		return Client{}
	}
	if h == nil || !r.trustsPeer(peer) {
		return r.peerClient(peer, lazyPeerKey)
	}
	var (
		addr netip.Addr
		err  error
	)
	switch r.kind {
	case kindXFF:
		it := hops{xff: xffHops{lines: h.Values(r.header)}}
		it.xff.line = len(it.xff.lines) - 1
		if it.xff.line >= 0 {
			it.xff.end = len(it.xff.lines[it.xff.line])
		}
		addr, err = pick(r, &it)
	case kindForwarded:
		addr, err = r.fromForwarded(h.Values(r.header))
	default:
		addr, err = r.fromSingle(h.Values(r.header))
	}
	switch {
	case err != nil:
		r.fallbacks.Add(1)
		if r.onFallback != nil {
			r.onFallback(r.header, err)
		}
		return r.peerClient(peer, lazyPeerKey)
	case !addr.IsValid():
		return r.peerClient(peer, lazyPeerKey) // no header: the peer is the client
	}
	return r.client(addr, true)
}

// Key returns the limiting key of addr: the IPv4 address, or the IPv6
// address bucketed to the resolver's prefix. It returns "" for an invalid
// address.
func (r *Resolver) Key(addr netip.Addr) string {
	addr = normalise(addr)
	switch {
	case !addr.IsValid():
		return ""
	}
	var buf [64]byte
	if addr.Is4() {
		return string(addr.AppendTo(buf[:0]))
	}
	p, _ := addr.Prefix(r.v6bits)
	return string(p.AppendTo(buf[:0]))
}

func (r *Resolver) peerClient(peer netip.Addr, lazy bool) Client {
	if lazy {
		return Client{Addr: peer}
	}
	return r.client(peer, false)
}

func (r *Resolver) client(addr netip.Addr, forwarded bool) Client {
	return Client{Addr: addr, Key: r.Key(addr), Forwarded: forwarded}
}

func (r *Resolver) trustsPeer(peer netip.Addr) bool {
	return r.hops > 0 || r.isTrusted(peer)
}

func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hops yields forwarded addresses from the right-most one leftwards, from
// X-Forwarded-For or from Forwarded elements. (A concrete type rather than
// an interface keeps it on the stack.)
type hops struct {
	forwarded bool
	xff       xffHops
	fwd       fwdHops
}

// next returns the next address leftwards. ok is false when the list is
// exhausted; err reports an entry that is not a usable address.
func (h *hops) next() (a netip.Addr, ok bool, err error) {
	if h.forwarded {
		return h.fwd.next()
	}
	return h.xff.next()
}

// pick walks h from the right and returns the client's address. An empty
// list returns the zero Addr and no error.
func pick(r *Resolver, h *hops) (netip.Addr, error) {
	var last netip.Addr
	seen := 0
	for {
		a, ok, err := h.next()
		if !ok {
			break
		}
		seen++
		if r.hops > 0 {
			if seen < r.hops {
				continue // a proxy's address, appended by the proxy nearer to us
			}
			return a, err
		}
		if err != nil {
			return netip.Addr{}, err
		}
		if !r.isTrusted(a) {
			return a, nil
		}
		last = a
	}
	switch {
	case seen == 0:
		return netip.Addr{}, nil
	case r.hops > 0:
		return netip.Addr{}, ErrTooFewHops
	}
	// Every hop is a trusted proxy: the request started inside the trusted
	// network, and its furthest hop is the client.
	return last, nil
}

func (r *Resolver) fromSingle(lines []string) (netip.Addr, error) {
	if len(lines) == 0 {
		return netip.Addr{}, nil
	}
	if len(lines) > 1 || strings.IndexByte(lines[0], ',') >= 0 {
		return netip.Addr{}, ErrMalformed
	}
	return parseEntry(strings.TrimSpace(lines[0]))
}

// ParseAddr parses a host or host:port as found in RemoteAddr and forwarded
// headers ("192.0.2.1", "192.0.2.1:80", "[2001:db8::1]:443", "2001:db8::1",
// "fe80::1%eth0") and normalises it.
func ParseAddr(s string) (netip.Addr, error) {
	return parseEntry(s)
}

func parseEntry(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, ErrMalformed
	}
	host := s
	switch {
	case s[0] == '[':
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, ErrMalformed
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:])) {
			return netip.Addr{}, ErrMalformed
		}
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		if !validPort(s[i+1:]) {
			return netip.Addr{}, ErrMalformed
		}
		host = s[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, ErrMalformed
	}
	a = normalise(a)
	if a.IsUnspecified() {
		return netip.Addr{}, ErrUnusable
	}
	return a, nil
}

func validPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func normalise(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}
