package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// ListenerTLS serves a listener over TLS from files that are read again
// when they change (as Kubernetes rotates a mounted secret): a connection
// made after the change gets the new certificate.
type ListenerTLS struct {
	// CertFile and KeyFile hold the server's certificate chain and key
	// (PEM); both are required.
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, holds the CA certificates (PEM) that client
	// certificates must chain to: clients without one are refused.
	ClientCAFile string
	// ClientSAN, when set with ClientCAFile, is a DNS name a client
	// certificate must hold.
	ClientSAN string
}

// ClientTLS is a client's TLS from files that are read again when they
// change.
type ClientTLS struct {
	// CAFile holds the CA certificates (PEM) the server's certificate
	// must chain to; "" means the system's roots.
	CAFile string
	// CertFile and KeyFile, when set, are the client certificate and key
	// (PEM) presented to a server that asks for one.
	CertFile string
	KeyFile  string
	// ServerName, when set, is the name the server's certificate must
	// hold instead of the host dialled.
	ServerName string
}

// certRecheck is how often, at most, certFiles looks at its files again:
// on a handshake, when this long has passed since the last look.
const certRecheck = time.Second

// certFiles owns a certificate, its key and a CA bundle read from files,
// and reads them again when their content changes. A change that does not
// load (a pair written half way) keeps the last good certificates and is
// logged once. It is safe for concurrent use.
type certFiles struct {
	what                      string // for logs: "gRPC listener", "xDS client"
	certFile, keyFile, caFile string
	logger                    *slog.Logger
	every                     time.Duration // how often to look at the files: certRecheck; tests set 0

	mu      sync.Mutex
	checked time.Time
	sum     []byte // of the files last read, good or not
	cert    *tls.Certificate
	pool    *x509.CertPool
}

// loadCertFiles reads the files ("" for those not used): an error names
// what failed.
func loadCertFiles(what, certFile, keyFile, caFile string, logger *slog.Logger) (*certFiles, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%s TLS: a certificate needs its key, and a key its certificate (got certificate %q, key %q)", what, certFile, keyFile)
	}
	c := &certFiles{what: what, certFile: certFile, keyFile: keyFile, caFile: caFile, logger: logger, every: certRecheck}
	sum, err := c.read()
	if err != nil {
		return nil, fmt.Errorf("%s TLS: %w", what, err)
	}
	c.sum, c.checked = sum, time.Now()
	return c, nil
}

// read loads the files into c, returning their sum. It requires c.mu
// unless c is not shared yet.
func (c *certFiles) read() ([]byte, error) {
	h := sha256.New()
	var data [3][]byte
	for i, p := range []string{c.certFile, c.keyFile, c.caFile} {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		data[i] = b
		h.Write(b)
		h.Write([]byte{0})
	}
	sum := h.Sum(nil)
	var cert *tls.Certificate
	if c.certFile != "" {
		pair, err := tls.X509KeyPair(data[0], data[1])
		if err != nil {
			return sum, fmt.Errorf("%s, %s: %w", c.certFile, c.keyFile, err)
		}
		cert = &pair
	}
	var pool *x509.CertPool
	if c.caFile != "" {
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data[2]) {
			return sum, fmt.Errorf("%s: no PEM certificate in it", c.caFile)
		}
	}
	c.cert, c.pool = cert, pool
	return sum, nil
}

// current returns the certificate (nil when none is configured) and the
// CA pool (nil: none), first reading the files again when certRecheck has
// passed and their content changed.
func (c *certFiles) current() (*tls.Certificate, *x509.CertPool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= c.every {
		c.checked = now
		c.recheck()
	}
	return c.cert, c.pool
}

// recheck reloads the files when their content changed. It requires c.mu.
func (c *certFiles) recheck() {
	h := sha256.New()
	for _, p := range []string{c.certFile, c.keyFile, c.caFile} {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			// Mid-rotation, or gone: keep serving what was loaded.
			return
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	if bytes.Equal(h.Sum(nil), c.sum) {
		return
	}
	cert, pool := c.cert, c.pool
	sum, err := c.read()
	c.sum = sum
	if err != nil {
		c.cert, c.pool = cert, pool
		c.logger.Warn("TLS files changed but do not load; the previous certificates stay in use", "for", c.what, "err", err)
		return
	}
	c.logger.Info("TLS files changed; new connections use the new certificates", "for", c.what,
		"cert", c.certFile, "ca", c.caFile)
}

// serverConfig is a listener's TLS configuration: each handshake gets the
// current certificate, and, with a CA, requires a client certificate
// that chains to it (and holds san, when set).
func (c *certFiles) serverConfig(nextProtos []string, san string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := c.current()
			cfg := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   nextProtos,
				Certificates: []tls.Certificate{*cert},
			}
			if pool != nil {
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
				cfg.ClientCAs = pool
				if san != "" {
					cfg.VerifyConnection = func(cs tls.ConnectionState) error {
						if len(cs.PeerCertificates) == 0 {
							return errors.New("no client certificate")
						}
						return cs.PeerCertificates[0].VerifyHostname(san)
					}
				}
			}
			return cfg, nil
		},
	}
}

// clientConfig is a client's TLS configuration with the current files.
func (c *certFiles) clientConfig(serverName string) *tls.Config {
	cert, pool := c.current()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: serverName}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// clientCredentials are gRPC transport credentials that make each
// handshake with the current files, so that a connection made after a
// rotation uses the new certificates.
type clientCredentials struct {
	credentials.TransportCredentials // for Info and OverrideServerName
	files                            *certFiles
	serverName                       string
}

func newClientCredentials(files *certFiles, serverName string) *clientCredentials {
	return &clientCredentials{TransportCredentials: credentials.NewTLS(files.clientConfig(serverName)), files: files, serverName: serverName}
}

// ClientHandshake implements credentials.TransportCredentials.
func (c *clientCredentials) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.files.clientConfig(c.serverName)).ClientHandshake(ctx, authority, conn)
}

// Clone implements credentials.TransportCredentials.
func (c *clientCredentials) Clone() credentials.TransportCredentials {
	return &clientCredentials{TransportCredentials: c.TransportCredentials.Clone(), files: c.files, serverName: c.serverName}
}

// listenerTLS returns the configuration of the TLS that t describes.
func (s *Server) listenerTLS(what string, t *ListenerTLS, nextProtos []string) (*tls.Config, error) {
	if t.CertFile == "" || t.KeyFile == "" {
		return nil, fmt.Errorf("server: %s TLS needs both a certificate and a key file", what)
	}
	if t.ClientSAN != "" && t.ClientCAFile == "" {
		return nil, fmt.Errorf("server: %s TLS: a client SAN to check needs the client CA file", what)
	}
	files, err := loadCertFiles(what, t.CertFile, t.KeyFile, t.ClientCAFile, s.Logger)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return files.serverConfig(nextProtos, t.ClientSAN), nil
}

// grpcTLSConfig is the gRPC listener's TLS: GRPCTLS when set, else
// shared, the TLS of both listeners (nil: plain text).
func (s *Server) grpcTLSConfig(shared *tls.Config) (*tls.Config, error) {
	if s.GRPCTLS == nil {
		return shared, nil
	}
	return s.listenerTLS("gRPC listener", s.GRPCTLS, []string{"h2"})
}
