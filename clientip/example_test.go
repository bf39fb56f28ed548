package clientip_test

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/floodgate-go/floodgate/clientip"
)

// Behind a load balancer in 10.0.0.0/8, the client is the right-most
// X-Forwarded-For address that is not the load balancer's; whatever the
// client wrote further left is ignored.
func ExampleResolver_Request() {
	r := clientip.MustNew(&clientip.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	})
	req, _ := http.NewRequest("GET", "http://example.com/", nil)
	req.RemoteAddr = "10.0.0.5:41000"
	req.Header.Set("X-Forwarded-For", "6.6.6.6, 2001:db8:aa:bb:1:2:3:4")
	c := r.Request(req)
	fmt.Println("audit:", c.Addr)
	fmt.Println("limit on:", c.Key)

	// The same header sent straight to the server is not believed.
	req.RemoteAddr = "198.51.100.7:41000"
	fmt.Println("direct:", r.Request(req).Key)
	// Output:
	// audit: 2001:db8:aa:bb:1:2:3:4
	// limit on: 2001:db8:aa:bb::/64
	// direct: 198.51.100.7
}

// RFC 7239 Forwarded headers are read when configured; "unknown" and
// obfuscated identifiers are not addresses, so the peer is used and the
// fallback is counted.
func ExampleOptions_forwarded() {
	r := clientip.MustNew(&clientip.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Header:         clientip.HeaderForwarded,
	})
	peer := netip.MustParseAddr("127.0.0.1")
	h := http.Header{}
	h.Set("Forwarded", `for="[2001:db8::1]:4711";proto=https`)
	fmt.Println(r.Resolve(peer, h).Addr)
	h.Set("Forwarded", `for="_gazonk"`)
	fmt.Println(r.Resolve(peer, h).Addr, r.Fallbacks())
	// Output:
	// 2001:db8::1
	// 127.0.0.1 1
}
