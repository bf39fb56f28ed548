package clientip

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func mustPrefixes(t testing.TB, ss ...string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestResolve(t *testing.T) {
	proxies := mustPrefixes(t, "10.0.0.0/8", "2001:db8:ffff::/48")
	xff := &Options{TrustedProxies: proxies}
	fwd := &Options{TrustedProxies: proxies, Header: HeaderForwarded}
	real := &Options{TrustedProxies: proxies, Header: "x-real-ip"}
	hops2 := &Options{TrustedHops: 2}
	tests := []struct {
		name     string
		opts     *Options
		peer     string
		h        http.Header
		want     string // Addr
		key      string
		fallback bool
	}{
		{"default ignores XFF", nil, "198.51.100.7:5555", hdr("X-Forwarded-For", "1.2.3.4"), "198.51.100.7", "198.51.100.7", false},
		{"default ignores Forwarded", nil, "198.51.100.7:5555", hdr("Forwarded", "for=1.2.3.4"), "198.51.100.7", "198.51.100.7", false},
		{"default ignores X-Real-IP", nil, "198.51.100.7:5555", hdr("X-Real-IP", "1.2.3.4"), "198.51.100.7", "198.51.100.7", false},
		{"untrusted peer's XFF ignored", xff, "198.51.100.7:1", hdr("X-Forwarded-For", "1.2.3.4"), "198.51.100.7", "198.51.100.7", false},
		{"trusted peer, one hop", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "203.0.113.9"), "203.0.113.9", "203.0.113.9", false},
		{"right-most untrusted, spoofed left", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.9, 10.2.2.2"), "203.0.113.9", "203.0.113.9", false},
		{"all lines form one list", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "203.0.113.9,10.2.2.2"), "203.0.113.9", "203.0.113.9", false},
		{"entry in a later line wins", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "203.0.113.9, 6.6.6.6", "X-Forwarded-For", "10.3.3.3"), "6.6.6.6", "6.6.6.6", false},
		{"all trusted: furthest hop", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "10.9.9.9, 10.2.2.2"), "10.9.9.9", "10.9.9.9", false},
		{"no header from trusted peer", xff, "10.1.1.1:1", hdr(), "10.1.1.1", "10.1.1.1", false},
		{"ports and brackets stripped", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "[2001:db8::1]:4711"), "2001:db8::1", "2001:db8::/64", false},
		{"v4 with port", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "203.0.113.9:8080"), "203.0.113.9", "203.0.113.9", false},
		{"mapped unmapped", xff, "[::ffff:10.1.1.1]:1", hdr("X-Forwarded-For", "::ffff:203.0.113.9"), "203.0.113.9", "203.0.113.9", false},
		{"zone dropped", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "fe80::1%eth0"), "fe80::1", "fe80::/64", false},
		{"unspecified falls back", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "0.0.0.0"), "10.1.1.1", "10.1.1.1", true},
		{"garbage falls back", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "1.2.3.4, not-an-ip"), "10.1.1.1", "10.1.1.1", true},
		{"empty entry falls back", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "1.2.3.4,"), "10.1.1.1", "10.1.1.1", true},
		{"garbage left of client ignored", xff, "10.1.1.1:1", hdr("X-Forwarded-For", "%%%, 203.0.113.9"), "203.0.113.9", "203.0.113.9", false},
		{"v6 peer trusted", xff, "[2001:db8:ffff::1]:1", hdr("X-Forwarded-For", "2001:db8:1:2:3:4:5:6"), "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64", false},

		{"forwarded v4", fwd, "10.1.1.1:1", hdr("Forwarded", "for=203.0.113.9;proto=https"), "203.0.113.9", "203.0.113.9", false},
		{"forwarded quoted v6 with port", fwd, "10.1.1.1:1", hdr("Forwarded", `for="[2001:db8::1]:4711"`), "2001:db8::1", "2001:db8::/64", false},
		{"forwarded right-most untrusted", fwd, "10.1.1.1:1", hdr("Forwarded", "for=6.6.6.6, for=203.0.113.9;by=10.1.1.1, for=10.2.2.2"), "203.0.113.9", "203.0.113.9", false},
		{"forwarded case-insensitive name", fwd, "10.1.1.1:1", hdr("Forwarded", "For=203.0.113.9"), "203.0.113.9", "203.0.113.9", false},
		{"forwarded lines joined", fwd, "10.1.1.1:1", hdr("Forwarded", "for=6.6.6.6", "Forwarded", "for=203.0.113.9"), "203.0.113.9", "203.0.113.9", false},
		{"forwarded unknown falls back", fwd, "10.1.1.1:1", hdr("Forwarded", "for=unknown"), "10.1.1.1", "10.1.1.1", true},
		{"forwarded obfuscated falls back", fwd, "10.1.1.1:1", hdr("Forwarded", `for="_hidden"`), "10.1.1.1", "10.1.1.1", true},
		{"forwarded without for falls back", fwd, "10.1.1.1:1", hdr("Forwarded", "proto=https"), "10.1.1.1", "10.1.1.1", true},
		{"forwarded unquoted v6 is malformed", fwd, "10.1.1.1:1", hdr("Forwarded", "for=2001:db8::1"), "10.1.1.1", "10.1.1.1", true},
		{"forwarded duplicate for", fwd, "10.1.1.1:1", hdr("Forwarded", "for=1.2.3.4;for=5.6.7.8"), "10.1.1.1", "10.1.1.1", true},
		{"forwarded empty elements ignored", fwd, "10.1.1.1:1", hdr("Forwarded", "for=203.0.113.9, ,"), "203.0.113.9", "203.0.113.9", false},
		{"forwarded obfuscated port", fwd, "10.1.1.1:1", hdr("Forwarded", `for="203.0.113.9:_p1"`), "203.0.113.9", "203.0.113.9", false},
		{"forwarded escaped quote", fwd, "10.1.1.1:1", hdr("Forwarded", `for="203.0.113\.9"`), "203.0.113.9", "203.0.113.9", false},
		// A client's unterminated quote must not swallow the proxy's element.
		{"forwarded client garbage, proxy element intact", fwd, "10.1.1.1:1", hdr("Forwarded", `for="6.6.6.6, for=203.0.113.9`), "203.0.113.9", "203.0.113.9", false},
		{"forwarded client garbage, proxy v6 element", fwd, "10.1.1.1:1", hdr("Forwarded", `for="x, for="[2001:db8::7]"`), "2001:db8::7", "2001:db8::/64", false},
		{"forwarded untrusted peer", fwd, "198.51.100.7:1", hdr("Forwarded", "for=1.2.3.4"), "198.51.100.7", "198.51.100.7", false},
		{"forwarded ignores XFF", fwd, "10.1.1.1:1", hdr("X-Forwarded-For", "1.2.3.4"), "10.1.1.1", "10.1.1.1", false},

		{"x-real-ip from trusted proxy", real, "10.1.1.1:1", hdr("X-Real-IP", "203.0.113.9"), "203.0.113.9", "203.0.113.9", false},
		{"x-real-ip from untrusted peer", real, "198.51.100.7:1", hdr("X-Real-IP", "203.0.113.9"), "198.51.100.7", "198.51.100.7", false},
		{"x-real-ip with two values", real, "10.1.1.1:1", hdr("X-Real-IP", "1.1.1.1", "X-Real-IP", "203.0.113.9"), "10.1.1.1", "10.1.1.1", true},
		{"x-real-ip ignores XFF", real, "10.1.1.1:1", hdr("X-Forwarded-For", "1.2.3.4"), "10.1.1.1", "10.1.1.1", false},

		{"hops: second from right", hops2, "192.0.2.1:1", hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.9, 192.0.2.50"), "203.0.113.9", "203.0.113.9", false},
		{"hops: too few", hops2, "192.0.2.1:1", hdr("X-Forwarded-For", "203.0.113.9"), "192.0.2.1", "192.0.2.1", true},
		{"hops: across lines", hops2, "192.0.2.1:1", hdr("X-Forwarded-For", "203.0.113.9", "X-Forwarded-For", "192.0.2.50"), "203.0.113.9", "203.0.113.9", false},

		{"unix socket peer", nil, "@", hdr(), "invalid IP", "", false},
		{"mapped peer", nil, "[::ffff:198.51.100.7]:1", hdr(), "198.51.100.7", "198.51.100.7", false},
		{"peer without port", nil, "198.51.100.7", hdr(), "198.51.100.7", "198.51.100.7", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			req := &http.Request{RemoteAddr: tt.peer, Header: tt.h}
			c := r.Request(req)
			if got := c.Addr.String(); got != tt.want {
				t.Errorf("Addr = %s, want %s", got, tt.want)
			}
			if got := c.Key; got != tt.key {
				t.Errorf("Key = %q, want %q", got, tt.key)
			}
			if got, want := c.Key, r.Key(c.Addr); got != want {
				t.Errorf("Request's Key %q differs from Key(Addr) %q", got, want)
			}
			if got, want := r.Fallbacks() == 1, tt.fallback; got != want {
				t.Errorf("fallback counted = %v, want %v", got, want)
			}
		})
	}
}

func TestOnFallback(t *testing.T) {
	var got []error
	r := MustNew(&Options{
		TrustedProxies: mustPrefixes(t, "127.0.0.0/8"),
		Header:         HeaderForwarded,
		OnFallback: func(header string, err error) {
			if header != HeaderForwarded {
				t.Errorf("header = %q", header)
			}
			got = append(got, err)
		},
	})
	r.Request(&http.Request{RemoteAddr: "127.0.0.1:9", Header: hdr("Forwarded", "for=unknown")})
	r.Request(&http.Request{RemoteAddr: "127.0.0.1:9", Header: hdr("Forwarded", "for=")})
	if len(got) != 2 || !errors.Is(got[0], ErrUnusable) || !errors.Is(got[1], ErrMalformed) {
		t.Fatalf("fallback reasons = %v", got)
	}
}

func TestIPv6Prefix(t *testing.T) {
	for _, tt := range []struct {
		bits int
		addr string
		want string
	}{
		{0, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{48, "2001:db8:1:2:3:4:5:6", "2001:db8:1::/48"},
		{128, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6/128"},
		{56, "192.0.2.1", "192.0.2.1"},
		{0, "::ffff:192.0.2.1", "192.0.2.1"},
	} {
		r := MustNew(&Options{IPv6Prefix: tt.bits})
		if got := r.Key(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("/%d Key(%s) = %q, want %q", tt.bits, tt.addr, got, tt.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, tt := range []struct {
		opts Options
		want string
	}{
		{Options{TrustedHops: -1}, "TrustedHops must not be negative"},
		{Options{TrustedHops: 1, TrustedProxies: mustPrefixes(t, "10.0.0.0/8")}, "not both"},
		{Options{TrustedProxies: []netip.Prefix{{}}}, "TrustedProxies[0]"},
		{Options{IPv6Prefix: 129}, "IPv6Prefix"},
		{Options{Header: "X Bad"}, "not a valid header name"},
	} {
		_, err := New(&tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want error containing %q", tt.opts, err, tt.want)
		}
	}
}

// A client that is not behind a trusted proxy cannot move between buckets
// however it forges its headers.
func TestSpoofedHeadersNeverChangeKey(t *testing.T) {
	for _, header := range []string{"", HeaderForwarded, HeaderXRealIP} {
		r := MustNew(&Options{TrustedProxies: mustPrefixes(t, "10.0.0.0/8"), Header: header})
		for i := range 1000 {
			spoof := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}).String()
			h := hdr("X-Forwarded-For", spoof, "Forwarded", "for="+spoof, "X-Real-IP", spoof)
			c := r.Request(&http.Request{RemoteAddr: "198.51.100.7:40000", Header: h})
			if c.Key != "198.51.100.7" || c.Forwarded {
				t.Fatalf("%q: spoofed %s gave %+v", header, spoof, c)
			}
		}
	}
}

func TestResolveAllocs(t *testing.T) {
	r := MustNew(&Options{TrustedProxies: mustPrefixes(t, "10.0.0.0/8"), Header: HeaderForwarded})
	h := hdr("Forwarded", `for=6.6.6.6, for="[2001:db8::1]:4711";proto=https, for=10.0.0.2`)
	peer := netip.MustParseAddr("10.0.0.1")
	var c Client
	// Only the key string is allocated.
	if n := testing.AllocsPerRun(100, func() { c = r.Resolve(peer, h) }); n > 1 {
		t.Errorf("allocs = %v, want <= 1", n)
	}
	if c.Addr.String() != "2001:db8::1" {
		t.Errorf("Addr = %s", c.Addr)
	}
}
