package server

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/envoy"
)

// envoyOptions are the options of the Envoy service's limiters: the
// configuration's global failure policy, the chain of its global breaker
// and store deadline, and the server's observer (metrics, top keys and
// the status page's counts), reservations' metrics, logger and clock. Domains that no Envoy file
// defines fall back to the YAML configuration's limiter of that name.
func (s *Server) envoyOptions(c *config.Config) (*envoyOptions, error) {
	ch, err := s.envoyChain(s.envoyPolicy(c))
	if err != nil {
		return nil, err
	}
	o := floodgate.Options{
		FailurePolicy: c.FailurePolicy,
		Observer:      s.observe,
		Logger:        s.Logger,
		Clock:         s.Clock,
		Shadow:        s.Envoy.Shadow,
	}
	return &envoyOptions{Options: envoy.Options{Limiter: o, Store: ch.store, Lookup: s.limiter, Headers: s.Envoy.Headers,
		Reservations: envoyReservations{s.metrics}}, chain: ch}, nil
}

// envoyOptions are the Envoy service's options, and the chain of their
// store.
type envoyOptions struct {
	envoy.Options
	chain *chain
}

// envoyPolicy is the policy of the Envoy domains' limiters: the
// configuration's global breaker and store deadline.
func (s *Server) envoyPolicy(c *config.Config) policy {
	p := policy{breaker: c.Breaker}
	if c.Store.Redis != nil {
		p.deadline = c.Store.Redis.Deadline
	}
	return p
}

// EnvoySettings tune the Envoy service beyond its configuration files,
// with the reference service's switches.
type EnvoySettings struct {
	// Headers, when set, adds quota headers to the answers
	// (LIMIT_RESPONSE_HEADERS_ENABLED); see envoy.Headers.
	Headers *envoy.Headers
	// Shadow is the global shadow mode (SHADOW_MODE): statuses say what
	// the limits decided, and overall_code is always OK.
	Shadow bool
	// RequireDomains makes GET /healthcheck fail while no Envoy domain is
	// loaded (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	RequireDomains bool
}

// registerEnvoy puts the Envoy service on the gRPC server (behind
// envoyFront when it traces or waits for xDS), and reports it serving
// under the reference service's health check name, "ratelimit".
func (s *Server) registerEnvoy() {
	rlsv3.RegisterRateLimitServiceServer(s.grpcSrv, s.rateLimitServer())
	s.health.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING)
}

// rateLimitServer is what serves ShouldRateLimit: the Envoy service, or
// envoyFront when there is more to do than decide.
func (s *Server) rateLimitServer() rlsv3.RateLimitServiceServer {
	if s.tracer != nil || s.xds != nil {
		return envoyFront{s: s}
	}
	return s.envoy
}

// openEnvoy loads EnvoyConfigDir, or prepares the xDS client, and builds
// the Envoy service.
func (s *Server) openEnvoy() error {
	var cfg *envoy.Config // none until the first push, with xDS
	if s.EnvoyXDS != nil {
		if err := s.openXDS(); err != nil {
			return err
		}
	} else {
		var err error
		if cfg, err = envoy.LoadDir(s.EnvoyConfigDir); err != nil {
			return err
		}
	}
	opts, err := s.envoyOptions(s.Config)
	if err != nil {
		return err
	}
	svc, err := envoy.New(opts.Store, cfg, &opts.Options)
	if err != nil {
		return err
	}
	s.envoyOn.Store(opts.chain)
	if s.envoyKeep, err = newEnvoyKeep(s.Registerer); err != nil {
		return err
	}
	s.envoy = svc
	if cfg != nil {
		s.Logger.Info("envoy rate limit configuration loaded", "dir", s.EnvoyConfigDir, "domains", strings.Join(cfg.Domains(), ","))
	}
	return nil
}

// envoyDirSum hashes the names and contents of the files LoadDir would
// read, so that the watcher reloads only on a real change.
func envoyDirSum(dir string) []byte {
	paths, err := envoy.DirFiles(dir)
	if err != nil {
		return nil
	}
	h := sha256.New()
	for _, p := range paths {
		data, _ := os.ReadFile(p)
		h.Write([]byte(filepath.Base(p)))
		h.Write([]byte{0})
		h.Write(data)
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}
