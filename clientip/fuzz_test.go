package clientip

import (
	"net/http"
	"net/netip"
	"testing"
)

// checkFuzzResult asserts what must hold for any header: the resolver never
// panics, returns a valid address, and either took it from the header or fell
// back to the peer.
func checkFuzzResult(t *testing.T, r *Resolver, peer netip.Addr, h http.Header) {
	before := r.Fallbacks()
	c := r.Resolve(peer, h)
	if !c.Addr.IsValid() || c.Key == "" {
		t.Fatalf("invalid result %+v for %q", c, h)
	}
	if c.Addr.IsUnspecified() || c.Addr.Zone() != "" || c.Addr.Is4In6() {
		t.Fatalf("unnormalised address %s for %q", c.Addr, h)
	}
	if !c.Forwarded && c.Addr != peer {
		t.Fatalf("not forwarded but Addr %s != peer %s", c.Addr, peer)
	}
	if c.Forwarded && r.Fallbacks() != before {
		t.Fatalf("forwarded result counted as a fallback for %q", h)
	}
}

func FuzzXForwardedFor(f *testing.F) {
	for _, s := range []string{
		"203.0.113.9", "6.6.6.6, 203.0.113.9, 10.0.0.2", "[2001:db8::1]:4711",
		"::ffff:1.2.3.4", "fe80::1%eth0", "0.0.0.0", ",,,", "", " , 1.2.3.4 ,",
		"1.2.3.4:99999", "[::1", "unknown",
	} {
		f.Add(s, "10.0.0.7")
	}
	byCIDR := MustNew(&Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	byHops := MustNew(&Options{TrustedHops: 2})
	peer := netip.MustParseAddr("10.0.0.1")
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		h := http.Header{"X-Forwarded-For": {line1, line2}}
		checkFuzzResult(t, byCIDR, peer, h)
		checkFuzzResult(t, byHops, peer, h)
	})
}

func FuzzForwarded(f *testing.F) {
	for _, s := range []string{
		"for=203.0.113.9", `for="[2001:db8::1]:4711";proto=https;by=10.0.0.1`,
		"for=unknown", `for="_hidden"`, `for="x, for=1.2.3.4`, `for="\"`, "for=;",
		";;,,", `for="[::1]:_port"`, "FOR=1.2.3.4;For=5.6.7.8", `for="1.2.3.4\`,
	} {
		f.Add(s, "for=10.0.0.7")
	}
	r := MustNew(&Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: HeaderForwarded})
	peer := netip.MustParseAddr("10.0.0.1")
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		h := http.Header{"Forwarded": {line1, line2}}
		checkFuzzResult(t, r, peer, h)
		// A well-formed element appended by a proxy is always the one read,
		// whatever the client wrote before it.
		h = http.Header{"Forwarded": {line1 + ", for=203.0.113.9"}}
		if c := r.Resolve(peer, h); c.Addr != netip.MustParseAddr("203.0.113.9") {
			t.Fatalf("proxy's element lost after %q: got %+v", line1, c)
		}
	})
}

// FuzzRemoteAddr checks that Request, which reuses RemoteAddr's bytes as the
// key of a plain IPv4 peer, agrees with Key for any RemoteAddr.
func FuzzRemoteAddr(f *testing.F) {
	for _, s := range []string{"192.0.2.1:80", "192.0.2.1", "[::ffff:192.0.2.1]:80", "[fe80::1%eth0]:1", "::1", "@", "", "1.2.3.4:"} {
		f.Add(s)
	}
	r := MustNew(nil)
	f.Fuzz(func(t *testing.T, remote string) {
		c := r.Request(&http.Request{RemoteAddr: remote})
		if got, want := c.Key, r.Key(c.Addr); got != want {
			t.Fatalf("RemoteAddr %q: Key %q, want %q", remote, got, want)
		}
	})
}
