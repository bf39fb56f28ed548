package redistest

import (
	"crypto/tls"
	"net"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate/internal/testcert"
)

// StartTLS starts a single-node Redis that accepts only TLS connections, on
// a free loopback port, with a self-signed certificate for 127.0.0.1 made
// for the test. The returned server's TLS field is a client configuration
// that trusts that certificate; its Do speaks TLS. It stops when t ends.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	requireBinaries(t)
	certFile, keyFile, pool := testcert.SelfSigned(t, t.TempDir())
	conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	var last error
	for range 5 {
		port := freePort(t, false)
		s := &Server{t: t, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: t.TempDir(), TLS: conf,
			extra: []string{"--port", "0", "--tls-port", strconv.Itoa(port),
				"--tls-cert-file", certFile, "--tls-key-file", keyFile,
				"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no"}}
		if last = s.start(); last == nil {
			t.Cleanup(s.Kill)
			t.Cleanup(s.checkTTLs)
			return s
		}
	}
	t.Fatalf("redistest: cannot start redis-server with TLS: %v", last)
	return nil
}
