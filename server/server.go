// Package server is floodgate's decision service: the HTTP JSON API, the gRPC
// listener (health, and Envoy's rate limit API when registered), Prometheus
// metrics and hot reload of the configuration.
//
// A Server's dependencies are its exported fields. Open starts it, Reload
// swaps in a new configuration atomically, and Close shuts it down
// gracefully. The store is the caller's: the server never closes it.
package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/envoy"
	"github.com/floodgate-go/floodgate/store"
)

// Defaults of a Server's optional fields.
const (
	// The listeners default to loopback: check and refund need no
	// credentials, so exposing them is a decision (--http :8080).
	DefaultHTTPAddr        = "127.0.0.1:8080"
	DefaultGRPCAddr        = "127.0.0.1:8081"
	DefaultMaxBodyBytes    = 64 << 10
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultGRPCStreamWorkers is how many goroutines serve gRPC calls by
	// default; see Server.GRPCStreamWorkers.
	DefaultGRPCStreamWorkers = 128
)

// Server is the decision service. Set its fields, then call Open; fields
// must not change after that.
type Server struct {
	// Config is the configuration served from Open on; required.
	Config *config.Config
	// ConfigPath, when set, is the file Reload reads.
	ConfigPath string
	// WatchConfig reloads ConfigPath whenever its content changes.
	WatchConfig bool
	// Store holds rule state; required. It is built once: a reload that
	// changes the store section is applied except for the store, and
	// logged.
	Store store.Store
	// Fallback, when set, decides for every limiter while a remote Store
	// cannot answer (store/guard's Fallback), typically store/share over a
	// memory store.
	Fallback store.Store

	// HTTPAddr is the HTTP API's listen address; "" means
	// DefaultHTTPAddr. GRPCAddr is the gRPC listen address; "" means
	// DefaultGRPCAddr, "-" disables gRPC.
	HTTPAddr string
	GRPCAddr string
	// TLSCertFile and TLSKeyFile, when both set, serve both listeners over
	// TLS. The files are read again when they change.
	TLSCertFile string
	TLSKeyFile  string
	// GRPCTLS, when set, serves the gRPC listener over TLS of its own
	// (client certificates required when it names a CA), and leaves the
	// HTTP listener to TLSCertFile: plain text without it, as the probes
	// of the reference service's deployments expect.
	GRPCTLS *ListenerTLS

	// AdminToken guards the admin endpoints (AdminEndpoints lists them)
	// as a bearer token. When empty, they answer 403.
	AdminToken string
	// TicketSecret authenticates the tickets the API hands out. Instances
	// that share a store must share it; nil means a random secret for this
	// process (tickets then refund only on the instance that issued them).
	TicketSecret []byte
	// MaxBodyBytes caps request bodies; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ShutdownTimeout bounds how long Close waits for in-flight requests;
	// 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// DrainPeriod is how long Close keeps accepting requests after it has
	// turned readiness off (/readyz 503, gRPC health NOT_SERVING, HTTP
	// keep-alive off), so that load balancers stop sending before the
	// listeners close. 0 means none.
	DrainPeriod time.Duration

	// Registerer receives the service's metrics and Gatherer serves
	// /metrics; nil means a fresh registry for both.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Logger receives the service's logs; nil means slog.Default().
	Logger *slog.Logger
	// Clock is the limiters' clock; nil means the system clock. Tests set
	// a clock that moves only when told to.
	Clock floodgate.Clock
	// EnvoyConfigDir, when set, is a directory of configuration files in
	// the format of Envoy's reference rate limit service; the gRPC listener
	// then serves envoy.service.ratelimit.v3.RateLimitService from them.
	// Reload and the watcher reload it with the configuration. Requests for
	// a domain no file defines are decided by the configuration's limiter
	// of that name, each descriptor's entries being its attributes.
	EnvoyConfigDir string
	// EnvoyRemoveAfter is how long a domain whose file a reload no longer
	// finds in EnvoyConfigDir keeps being served with its last limits
	// (logged at WARN, and reported by floodgate_envoy_domain_file_missing)
	// before it is removed: a file deleted or moved away and back within it
	// never lifts its domain's limits. 0 means DefaultEnvoyRemoveAfter; a
	// negative value removes the domain on the first reload that misses it.
	EnvoyRemoveAfter time.Duration
	// EnvoyXDS, when set, receives the Envoy domains from an xDS
	// management server instead of EnvoyConfigDir (xds.go).
	EnvoyXDS *EnvoyXDS
	// Envoy tunes the Envoy service further; see EnvoySettings.
	Envoy EnvoySettings
	// TracerProvider, when set, traces every decision and store call
	// (OpenTelemetry; tracing.go). nil traces nothing, at no cost.
	TracerProvider trace.TracerProvider
	// GRPCServices register further services on the gRPC server before it
	// starts.
	GRPCServices []func(grpc.ServiceRegistrar)
	// GRPCStreamWorkers is how many long-lived goroutines serve gRPC calls;
	// a call that arrives while all of them are busy gets a goroutine of
	// its own. 0 means DefaultGRPCStreamWorkers; a negative value gives
	// every call its own goroutine (gRPC's default). A worker's stack has
	// already grown to what a decision needs, so a call served by one
	// skips the stack growth (runtime.morestack) that costs a fresh
	// goroutine about a tenth of the call's CPU time.
	GRPCStreamWorkers int

	limiters  atomic.Pointer[limiterSet]
	state     atomic.Pointer[reloadState]
	metrics   *metrics
	live      *live // top keys and per-second counts (live.go)
	envoy     *envoy.Service
	envoyKeep *envoyKeep  // the domains served after their file went (envoykeep.go)
	remote    bool        // Store is remote (Redis), not in process: limiters decide on guarded chains (stores.go)
	grants    grantStores // every chain's grants, for their counts
	envoyOn   atomic.Pointer[chain]
	// envoyChains are the Envoy domains' stores, by policy (stores.go).
	envoyChains   map[policy]*chain
	envoyChainsMu sync.Mutex
	secret        []byte
	refunded      refunded
	draining      atomic.Bool // Close's drain period: answers close their connection
	reloadMu      sync.Mutex

	httpLn, grpcLn net.Listener
	httpSrv        *http.Server
	grpcSrv        *grpc.Server
	health         *health.Server
	done           chan struct{}
	wg             sync.WaitGroup
	closeOnce      sync.Once
	closeErr       error
	watcher        *watcher
	xds            *xdsClient // when EnvoyXDS is set
	tracer         trace.Tracer
}

// limiterSet is one configuration's limiters, with the gateway sections
// that refer to them, swapped as a whole.
type limiterSet struct {
	config  *config.Config
	byName  map[string]*floodgate.Limiter
	chains  map[string]*chain   // each limiter's store (stores.go)
	keyed   map[string][]string // each limiter's rules that need a key
	names   []string            // sorted
	gateway *gatewaySet
	// maxRules is the most rules a limiter has: the most keys a ticket
	// holds.
	maxRules int
}

// reloadState is what /readyz reports about the configuration.
type reloadState struct {
	loadedAt time.Time
	err      error // the last reload's error; nil after a success
	failedAt time.Time
}

// Open validates the fields, builds the limiters and starts listening. It
// returns once both listeners accept connections.
func (s *Server) Open() error {
	if s.Config == nil {
		return errors.New("server: Config is required")
	}
	if s.Store == nil {
		return errors.New("server: Store is required")
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.MaxBodyBytes <= 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.ShutdownTimeout <= 0 {
		s.ShutdownTimeout = DefaultShutdownTimeout
	}
	if s.Registerer == nil && s.Gatherer == nil {
		r := prometheus.NewRegistry()
		s.Registerer, s.Gatherer = r, r
	}
	s.secret = s.TicketSecret
	if len(s.secret) == 0 {
		s.secret = make([]byte, 32)
		if _, err := rand.Read(s.secret); err != nil {
			return fmt.Errorf("server: ticket secret: %w", err)
		}
	}
	m, err := newMetrics(s.Registerer, s)
	if err != nil {
		return err
	}
	s.metrics = m
	s.live = newLive(s.Clock)
	_, inProcess := s.Store.(store.Binder) // only in-process stores bind
	s.remote = !inProcess
	if s.TracerProvider != nil {
		s.tracer = s.TracerProvider.Tracer(tracerName)
	}
	if s.remote {
		if err := s.registerGrants(); err != nil {
			return err
		}
	}
	set, err := s.build(s.Config)
	if err != nil {
		return err
	}
	s.limiters.Store(set)
	if s.EnvoyConfigDir != "" || s.EnvoyXDS != nil {
		if s.GRPCAddr == "-" {
			return errors.New("server: Envoy domains (EnvoyConfigDir, EnvoyXDS) need the gRPC listener")
		}
		if err := s.openEnvoy(); err != nil {
			return err
		}
	}
	s.state.Store(&reloadState{loadedAt: time.Now()})
	m.reloadOK(time.Now())

	tlsConfig, err := s.tlsConfig()
	if err != nil {
		return err
	}
	grpcTLS, err := s.grpcTLSConfig(tlsConfig)
	if err != nil {
		return err
	}
	httpAddr := s.HTTPAddr
	if httpAddr == "" {
		httpAddr = DefaultHTTPAddr
	}
	if s.httpLn, err = net.Listen("tcp", httpAddr); err != nil {
		return fmt.Errorf("server: http: %w", err)
	}
	if tlsConfig != nil {
		s.httpLn = tls.NewListener(s.httpLn, tlsConfig)
	} else {
		s.httpLn = problemListener{s.httpLn}
	}
	s.httpSrv = &http.Server{
		Handler:           s.closingWhenDraining(s.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.Logger.Handler(), slog.LevelWarn),
	}
	if s.GRPCAddr != "-" {
		grpcAddr := s.GRPCAddr
		if grpcAddr == "" {
			grpcAddr = DefaultGRPCAddr
		}
		if s.grpcLn, err = net.Listen("tcp", grpcAddr); err != nil {
			s.httpLn.Close()
			return fmt.Errorf("server: grpc: %w", err)
		}
		opts := []grpc.ServerOption{
			grpc.ChainUnaryInterceptor(s.metrics.unaryInterceptor),
			grpc.ChainStreamInterceptor(s.metrics.streamInterceptor),
		}
		if grpcTLS != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(grpcTLS)))
		}
		if w := s.GRPCStreamWorkers; w >= 0 {
			if w == 0 {
				w = DefaultGRPCStreamWorkers
			}
			opts = append(opts, grpc.NumStreamWorkers(uint32(w)))
		}
		s.grpcSrv = grpc.NewServer(opts...)
		s.health = health.NewServer()
		healthpb.RegisterHealthServer(s.grpcSrv, s.health)
		if s.envoy != nil {
			s.registerEnvoy()
		}
		for _, register := range s.GRPCServices {
			register(s.grpcSrv)
		}
	}
	if s.WatchConfig && (s.ConfigPath != "" || s.EnvoyConfigDir != "") {
		if err := s.watch(); err != nil {
			s.httpLn.Close()
			if s.grpcLn != nil {
				s.grpcLn.Close()
			}
			return fmt.Errorf("server: watching the configuration: %w", err)
		}
	}
	s.done = make(chan struct{})
	s.startXDS()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.httpSrv.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.Logger.Error("http server stopped", "err", err)
		}
	}()
	if s.grpcSrv != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.grpcSrv.Serve(s.grpcLn); err != nil {
				s.Logger.Error("grpc server stopped", "err", err)
			}
		}()
	}
	return nil
}

func (s *Server) tlsConfig() (*tls.Config, error) {
	if s.TLSCertFile == "" && s.TLSKeyFile == "" {
		return nil, nil
	}
	if s.TLSCertFile == "" || s.TLSKeyFile == "" {
		return nil, errors.New("server: TLS needs both a certificate and a key file")
	}
	return s.listenerTLS("listeners'", &ListenerTLS{CertFile: s.TLSCertFile, KeyFile: s.TLSKeyFile}, []string{"h2", "http/1.1"})
}

// HTTPAddress returns the HTTP listener's bound address (after Open).
func (s *Server) HTTPAddress() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// GRPCAddress returns the gRPC listener's bound address, or "" when gRPC is
// disabled.
func (s *Server) GRPCAddress() string {
	if s.grpcLn == nil {
		return ""
	}
	return s.grpcLn.Addr().String()
}

// ErrShutdownTimeout is what Close returns when requests were still in
// flight after ShutdownTimeout and were cut off.
var ErrShutdownTimeout = errors.New("server: requests still in flight after the shutdown timeout were cut off")

// Close stops the service gracefully: health checks report NOT_SERVING and
// readiness fails, for DrainPeriod the listeners still accept, then they
// stop accepting and in-flight requests finish (for at most
// ShutdownTimeout, after which they are cut off and Close returns
// ErrShutdownTimeout). It does not close Store.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.done == nil {
			return
		}
		// Answers close their connections from the moment readiness
		// fails, not only once the watcher has stopped.
		s.draining.Store(s.DrainPeriod > 0)
		close(s.done)
		if s.watcher != nil {
			s.watcher.close()
		}
		s.stopXDS()
		s.stopEnvoyKeep()
		if s.health != nil {
			s.health.Shutdown()
		}
		if s.DrainPeriod > 0 {
			time.Sleep(s.DrainPeriod)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
		defer cancel()
		var wg sync.WaitGroup
		if s.grpcSrv != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stopped := make(chan struct{})
				go func() { s.grpcSrv.GracefulStop(); close(stopped) }()
				select {
				case <-stopped:
				case <-ctx.Done():
					s.grpcSrv.Stop()
				}
			}()
		}
		if err := s.httpSrv.Shutdown(ctx); err != nil {
			s.httpSrv.Close()
		}
		if ctx.Err() != nil {
			s.closeErr = ErrShutdownTimeout
		}
		wg.Wait()
		s.wg.Wait()
		s.closeChains()
	})
	return s.closeErr
}

// closingWhenDraining makes every answer close its HTTP/1 connection during
// the drain period, so that keep-alive clients reconnect (to another
// instance) after a whole exchange, rather than find the connection cut
// when the listener closes. Idle connections are left alone until then.
func (s *Server) closingWhenDraining(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// build makes the limiters of c on the server's store.
func (s *Server) build(c *config.Config) (*limiterSet, error) {
	set := &limiterSet{config: c, byName: make(map[string]*floodgate.Limiter, len(c.Limiters)),
		chains: make(map[string]*chain, len(c.Limiters)), keyed: make(map[string][]string, len(c.Limiters))}
	prev := s.limiters.Load()
	for i := range c.Limiters {
		cl := &c.Limiters[i]
		var replaces *floodgate.Limiter // a reload's limiter takes over its old version's keys
		if prev != nil {
			replaces = prev.byName[cl.Name]
		}
		ch, err := s.newChain(policy{deadline: cl.Deadline, breaker: cl.Breaker}, granted(cl.Rules))
		if err != nil {
			s.retire(set)
			return nil, err
		}
		set.chains[cl.Name] = ch
		l, err := cl.New(ch.store, floodgate.Options{
			Observer: s.observe,
			Logger:   s.Logger,
			Clock:    s.Clock,
			Replaces: replaces,
		})
		if err != nil {
			s.retire(set)
			return nil, err
		}
		set.byName[cl.Name] = l
		for _, r := range cl.Rules {
			if len(r.Key) > 0 || r.KeyFunc != nil {
				set.keyed[cl.Name] = append(set.keyed[cl.Name], r.Name)
			}
		}
		set.names = append(set.names, cl.Name)
		set.maxRules = max(set.maxRules, len(cl.Rules))
	}
	sort.Strings(set.names)
	gw, err := buildGateway(c, set)
	if err != nil {
		return nil, err
	}
	set.gateway = gw
	return set, nil
}

// Reload reads ConfigPath (and EnvoyConfigDir) again and, when both are
// valid, swaps the new limiters in atomically: decisions already running
// finish on the old set. When either is not, the old configuration keeps
// serving, and the error is logged, counted and reported by /readyz.
// Reload is safe to call concurrently and from signal handlers' goroutines.
func (s *Server) Reload() error {
	if s.ConfigPath == "" && s.EnvoyConfigDir == "" {
		return errors.New("server: no configuration file to reload")
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	err := s.reload()
	now := time.Now()
	if err != nil {
		prev := s.state.Load()
		s.state.Store(&reloadState{loadedAt: prev.loadedAt, err: err, failedAt: now})
		s.metrics.reloadFailed()
		s.Logger.Error("config reload failed; the previous configuration keeps serving",
			"file", s.ConfigPath, "envoy_dir", s.EnvoyConfigDir, "err", err)
		return err
	}
	s.state.Store(&reloadState{loadedAt: now})
	s.metrics.reloadOK(now)
	s.live.retain(s.observed())
	return nil
}

func (s *Server) reload() error {
	c := s.limiters.Load().config
	if s.ConfigPath != "" {
		var err error
		if c, err = config.LoadWith(s.ConfigPath, config.Options{EnvoyDomains: s.EnvoyConfigDir != ""}); err != nil {
			return err
		}
		if err := checkRemovals(s.limiters.Load(), c); err != nil {
			return err
		}
		for _, section := range startOnlyChanges(s.Config, c) {
			s.Logger.Warn("config reload: the "+section+" section changed; restart the service to apply it",
				"file", s.ConfigPath)
		}
	}
	set, err := s.build(c)
	if err != nil {
		return err
	}
	if s.envoy != nil {
		ecfg := s.envoy.Config() // the domains last pushed over xDS
		if s.EnvoyXDS == nil {
			var err error
			if ecfg, err = envoy.LoadDir(s.EnvoyConfigDir); err != nil {
				s.retire(set)
				return err
			}
			ecfg = s.keepMissing(ecfg, time.Now())
		}
		// Update changes nothing when it fails, so it goes before the
		// limiters are swapped: a rejected reload swaps neither.
		opts, err := s.envoyOptions(c)
		if err == nil {
			err = s.envoy.Update(ecfg, &opts.Options)
		}
		if err != nil {
			s.retire(set)
			return err
		}
		s.envoyOn.Store(opts.chain)
		s.Logger.Info("envoy rate limit configuration reloaded", "dir", s.EnvoyConfigDir, "domains", strings.Join(ecfg.Domains(), ","))
	}
	s.retire(s.limiters.Swap(set))
	if s.ConfigPath != "" { // without one, only the Envoy directory was reloaded (logged above)
		s.Logger.Info("config reloaded", "file", s.ConfigPath, "limiters", len(set.names))
	}
	return nil
}

// checkRemovals refuses a configuration that drops limiters of the serving
// set without naming them under removed_limiters: a file written in place
// and read half way looks like one whose last limiters were deleted.
func checkRemovals(serving *limiterSet, c *config.Config) error {
	kept := make(map[string]bool, len(c.Limiters)+len(c.RemovedLimiters))
	for _, l := range c.Limiters {
		kept[l.Name] = true
	}
	for _, name := range c.RemovedLimiters {
		kept[name] = true
	}
	var dropped []string
	for _, name := range serving.names {
		if !kept[name] {
			dropped = append(dropped, name)
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	return fmt.Errorf("%s: the file no longer defines %s %s, which the service is serving: "+
		"if that is intended, list %s under removed_limiters (or restart the service); "+
		"a file written in place may have been read half way: write a new file and rename it over the old one",
		c.File, plural(len(dropped), "limiter", "limiters"), strings.Join(quoteAll(dropped), ", "), plural(len(dropped), "it", "them"))
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// limiter returns the current limiter named name, or nil.
func (s *Server) limiter(name string) *floodgate.Limiter {
	return s.limiters.Load().byName[name]
}
