package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// selfSigned writes a certificate for 127.0.0.1 and its key into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "floodgate test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	write(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	write(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})))
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestTLS serves both listeners over TLS.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	s := startService(t, e2eConfig, nil, "--tls-cert", certFile, "--tls-key", keyFile)
	addr := strings.TrimPrefix(s.http, "http://")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Post("https://"+addr+"/v1/check", "application/json",
		strings.NewReader(`{"limiter":"api","attributes":{"user":"u1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Errorf("https check: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	// A plain HTTP request to the TLS listener gets net/http's 400, never
	// an answer from the API.
	if r, err := http.Get("http://" + addr + "/healthz"); err == nil {
		r.Body.Close()
		if r.StatusCode == 200 {
			t.Error("the TLS listener answered plain HTTP")
		}
	}
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("grpc health over TLS: %v %v", h, err)
	}
	out, err := exec.Command(binary, "check", "--addr", "https://"+addr, "--insecure", "--limiter", "api", "--attr", "user=u2").CombinedOutput()
	if exitCode(err) != 0 || !strings.HasPrefix(string(out), "ALLOWED") {
		t.Errorf("check over https: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "serve", "--tls-cert", certFile, "--http", "127.0.0.1:0", "--grpc", "-").CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "TLS needs both a certificate and a key file") {
		t.Errorf("serve with a certificate and no key: %v\n%s", err, out)
	}
}
