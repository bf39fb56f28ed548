package server

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate-go/floodgate/internal/testcert"
)

// handshake connects to addr over TLS with conf and returns the serial
// number of the certificate the server presented.
func handshake(addr string, conf *tls.Config) (*big.Int, error) {
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// A TLS 1.3 server checks the client's certificate after the
	// handshake: a refusal arrives with the first read.
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) && err != io.EOF {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// A certificate rotated on disk is served to the next connection; a
// rotation that does not load keeps the last good certificate.
func TestCertFilesRotation(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "ca")
	crt, key := ca.Issue(t, dir, "svc")
	files, err := loadCertFiles("test listener", crt, key, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	files.every = 0 // look at the files on every handshake
	ln, err := tls.Listen("tcp", "127.0.0.1:0", files.serverConfig(nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	client := &tls.Config{RootCAs: ca.Pool, ServerName: "svc"}
	first, err := handshake(ln.Addr().String(), client)
	if err != nil {
		t.Fatal(err)
	}
	ca.Issue(t, dir, "svc")
	second, err := handshake(ln.Addr().String(), client)
	if err != nil || second.Cmp(first) == 0 {
		t.Fatalf("after the rotation: serial %v (was %v), %v", second, first, err)
	}
	if err := os.WriteFile(crt, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	third, err := handshake(ln.Addr().String(), client)
	if err != nil || third.Cmp(second) != 0 {
		t.Errorf("after a rotation that does not load: serial %v (want %v), %v", third, second, err)
	}
	if _, err := loadCertFiles("test listener", crt, key, "", files.logger); err == nil {
		t.Error("a certificate that does not load was accepted at start")
	}
}

// The gRPC listener's own TLS requires a client certificate of the CA
// holding the SAN asked for, leaves the HTTP listener in plain text, and
// follows a rotation of its files.
func TestGRPCListenerMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "ca")
	crt, key := ca.Issue(t, dir, "svc")
	goodCrt, goodKey := ca.Issue(t, dir, "envoy")
	otherCrt, otherKey := ca.Issue(t, dir, "intruder")
	ts := newTestServer(t, testConfig, nil, func(s *Server) {
		s.GRPCAddr = "127.0.0.1:0"
		s.GRPCTLS = &ListenerTLS{CertFile: crt, KeyFile: key, ClientCAFile: ca.File, ClientSAN: "envoy"}
	})
	if code, _, _ := ts.do("GET", "/healthz", ""); code != 200 {
		t.Errorf("the HTTP listener in plain text: %d", code)
	}
	pair := func(c, k string) []tls.Certificate {
		p, err := tls.LoadX509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{p}
	}
	check := func(certs []tls.Certificate) error {
		conf := &tls.Config{RootCAs: ca.Pool, ServerName: "svc", Certificates: certs}
		conn, err := grpc.NewClient(ts.GRPCAddress(), grpc.WithTransportCredentials(credentials.NewTLS(conf)))
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(pair(goodCrt, goodKey)); err != nil {
		t.Errorf("a client with the CA's certificate holding the SAN: %v", err)
	}
	if err := check(nil); err == nil {
		t.Error("a client without a certificate was served")
	}
	if err := check(pair(otherCrt, otherKey)); err == nil {
		t.Error("a client whose certificate lacks the SAN was served")
	}
	conf := &tls.Config{RootCAs: ca.Pool, ServerName: "svc", Certificates: pair(goodCrt, goodKey), NextProtos: []string{"h2"}}
	first, err := handshake(ts.GRPCAddress(), conf)
	if err != nil {
		t.Fatal(err)
	}
	ca.Issue(t, dir, "svc")
	waitUntil(t, "the rotated certificate", func() bool {
		serial, err := handshake(ts.GRPCAddress(), conf)
		return err == nil && serial.Cmp(first) != 0
	})
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
