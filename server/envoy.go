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
// configuration's global failure policy, breaker and store deadline, and
// the server's observer (metrics, top keys and the status page's counts),
// logger and clock. Domains that no Envoy file
// defines fall back to the YAML configuration's limiter of that name.
func (s *Server) envoyOptions(c *config.Config) *envoy.Options {
	o := floodgate.Options{
		FailurePolicy: c.FailurePolicy,
		Breaker:       c.Breaker,
		Observer:      s.observe,
		Logger:        s.Logger,
		Clock:         s.Clock,
		Fallback:      s.Fallback,
	}
	if c.Store.Redis != nil {
		o.Timeout = c.Store.Redis.Deadline
	}
	o.Shadow = s.Envoy.Shadow
	return &envoy.Options{Limiter: o, Lookup: s.limiter, Headers: s.Envoy.Headers}
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
	svc, err := envoy.New(s.store, cfg, s.envoyOptions(s.Config))
	if err != nil {
		return err
	}
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
