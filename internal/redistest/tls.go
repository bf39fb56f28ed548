package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// StartTLS starts a single-node Redis that accepts only TLS connections, on
// a free loopback port, with a certificate for 127.0.0.1 issued by a CA made
// for the test. The returned server's TLS field is a client configuration
// that trusts that CA; its Do speaks TLS. It stops when t ends.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	requireBinaries(t)
	dir := t.TempDir()
	pool := writeCerts(t, dir)
	conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	var last error
	for range 5 {
		port := freePort(t, false)
		s := &Server{t: t, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: t.TempDir(), TLS: conf,
			extra: []string{"--port", "0", "--tls-port", strconv.Itoa(port),
				"--tls-cert-file", filepath.Join(dir, "server.pem"), "--tls-key-file", filepath.Join(dir, "server.key"),
				"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "--tls-auth-clients", "no"}}
		if last = s.start(); last == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redistest: cannot start redis-server with TLS: %v", last)
	return nil
}

// writeCerts writes a CA (ca.pem) and a server certificate and key for
// 127.0.0.1 (server.pem, server.key) into dir and returns a pool holding
// the CA.
func writeCerts(t testing.TB, dir string) *x509.CertPool {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem": {Type: "CERTIFICATE", Bytes: der},
		"server.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool
}
