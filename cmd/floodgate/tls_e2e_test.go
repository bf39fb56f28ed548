package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/testcert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestTLS serves both listeners over TLS.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := testcert.SelfSigned(t, t.TempDir())
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
