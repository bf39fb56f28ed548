package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/envoy"
	"github.com/floodgate-go/floodgate/server"
	"github.com/floodgate-go/floodgate/store/redis"
)

const ratelimitUsage = `
Usage: floodgate ratelimit

Runs floodgate as a drop-in for Envoy's reference rate limit service
(github.com/envoyproxy/ratelimit), configured by that service's
environment variables alone: the same domain files (RUNTIME_ROOT,
RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY), the same Redis (REDIS_*), the
same ports (PORT, GRPC_PORT, DEBUG_PORT) and endpoints (/healthcheck, /json,
/rlconfig). It takes no flags. floodgate runs this command too when it is
started without arguments and RUNTIME_ROOT, REDIS_URL or REDIS_SOCKET_TYPE
is set, or under the name "ratelimit".

docs/envoy.md lists every variable, and whether floodgate honours it, maps
it onto its own setting, or ignores it (saying so in the log).
`

// referenceSignals are the variables whose presence, with no arguments,
// makes floodgate run as the reference service.
var referenceSignals = []string{"RUNTIME_ROOT", "REDIS_URL", "REDIS_SOCKET_TYPE"}

// referenceMode reports whether getenv holds the reference service's
// environment.
func referenceMode(getenv func(string) string) bool {
	for _, name := range referenceSignals {
		if getenv(name) != "" {
			return true
		}
	}
	return false
}

// referenceArgs turns the reference service's command lines into floodgate
// ratelimit, wherever a container runtime puts them:
//
//   - floodgate run as ratelimit (argv0 /bin/ratelimit, a link to it): a
//     manifest's command, which replaces floodgate's entrypoint;
//   - "/bin/ratelimit" or "ratelimit" as floodgate's first argument, or as
//     the first argument after serve: a command that compose (command:) or
//     Kubernetes (args:) appends to the image's entrypoint, floodgate serve.
//
// The reference takes no arguments and ignores any it is given; so does
// this mode's detection: what follows the command is dropped. floodgate
// ratelimit itself keeps its arguments (--help).
func referenceArgs(argv0 string, args []string) []string {
	if isReferenceCommand(argv0) {
		return []string{"ratelimit"}
	}
	if len(args) > 0 && args[0] == "ratelimit" {
		return args // the command itself, which reads its own flags
	}
	first := args
	if len(first) > 1 && first[0] == "serve" {
		first = first[1:]
	}
	if len(first) > 0 && isReferenceCommand(first[0]) {
		return []string{"ratelimit"}
	}
	return args
}

// isReferenceCommand reports whether arg is the reference image's command:
// ratelimit, by that name or a path to it.
func isReferenceCommand(arg string) bool {
	return arg == "ratelimit" || strings.HasSuffix(arg, "/ratelimit")
}

// reference is what the environment asks for.
type reference struct {
	logger      *slog.Logger
	httpAddr    string
	grpcAddr    string
	debugAddr   string
	promAddr    string // "" unless USE_PROMETHEUS
	promPath    string
	dir         string
	watchRoot   bool
	removeAfter time.Duration // FLOODGATE_ENVOY_REMOVE_AFTER
	redis       *redis.Options
	config      *config.Config
	envoy       server.EnvoySettings
	grpcTLS     *server.ListenerTLS // GRPC_SERVER_USE_TLS
	xds         *server.EnvoyXDS    // CONFIG_TYPE=GRPC_XDS_SOTW; nil: the runtime directory
	tracing     *tracing            // TRACING_ENABLED
}

func (m *Main) ratelimit(ctx context.Context, args []string) int {
	fs := m.flagSet("ratelimit", ratelimitUsage)
	if code, ok := m.parseArgs(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(m.Stderr, "floodgate ratelimit: unexpected argument %q: it is configured by the environment only\n", fs.Arg(0))
		return exitUsage
	}
	r, err := readReference(m.Getenv, m.Stderr)
	if err != nil {
		fmt.Fprintf(m.Stderr, "floodgate ratelimit: %v\n", err)
		return exitUsage
	}
	if err := m.runReference(ctx, r); err != nil {
		r.logger.Error("floodgate ratelimit failed", "err", err)
		return exitFail
	}
	return exitOK
}

// readReference reads the reference service's environment, logging the
// variables it sets that floodgate ignores.
func readReference(getenv func(string) string, logOut io.Writer) (*reference, error) {
	e := &env{getenv: getenv}
	level := map[string]string{"trace": "debug", "debug": "debug", "info": "info", "warn": "warn", "warning": "warn",
		"error": "error", "fatal": "error", "panic": "error"}[strings.ToLower(e.str("LOG_LEVEL"))]
	if level == "" {
		return nil, fmt.Errorf("LOG_LEVEL=%q: want trace, debug, info, warn, error, fatal or panic", e.str("LOG_LEVEL"))
	}
	format := strings.ToLower(e.str("LOG_FORMAT"))
	if format != "json" {
		format = "text" // the reference's default for anything but json
	}
	logger, err := newLogger(logOut, format, level)
	if err != nil {
		return nil, err
	}
	r := &reference{logger: logger}
	for _, v := range referenceEnv {
		switch {
		case !e.set(v.name):
		case v.use == refused:
			e.errs = append(e.errs, fmt.Sprintf("%s=%s: not supported: %s", v.name, getenv(v.name), v.note))
		case v.use == ignored:
			logger.Warn("reference setting ignored", "var", v.name, "reason", v.note)
		}
	}
	r.httpAddr = net.JoinHostPort(e.str("HOST"), e.port("PORT"))
	r.grpcAddr = net.JoinHostPort(e.str("GRPC_HOST"), e.port("GRPC_PORT"))
	r.debugAddr = net.JoinHostPort(e.str("DEBUG_HOST"), e.port("DEBUG_PORT"))
	if e.boolean("USE_PROMETHEUS") {
		r.promAddr, r.promPath = e.str("PROMETHEUS_ADDR"), e.str("PROMETHEUS_PATH")
	}
	r.dir = filepath.Join(e.str("RUNTIME_ROOT"), e.str("RUNTIME_SUBDIRECTORY"), e.str("RUNTIME_APPDIRECTORY"))
	r.watchRoot = e.boolean("RUNTIME_WATCH_ROOT")
	r.removeAfter = removeAfter(e.duration("FLOODGATE_ENVOY_REMOVE_AFTER"))
	if !e.boolean("RUNTIME_IGNOREDOTFILES") && e.getenv("RUNTIME_IGNOREDOTFILES") != "" {
		logger.Warn("reference setting mapped", "var", "RUNTIME_IGNOREDOTFILES", "reason", lookupEnvVar("RUNTIME_IGNOREDOTFILES").note)
	}
	if e.getenv("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") != "" && !e.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
		logger.Warn("reference setting mapped", "var", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "reason", lookupEnvVar("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT").note)
	}
	r.envoy.Shadow = e.boolean("SHADOW_MODE")
	r.envoy.RequireDomains = e.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	if quota, ietf := e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED"), e.boolean("FLOODGATE_IETF_HEADERS"); quota || ietf {
		h := &envoy.Headers{IETF: ietf}
		if quota {
			h.Limit, h.Remaining, h.Reset = e.str("LIMIT_LIMIT_HEADER"), e.str("LIMIT_REMAINING_HEADER"), e.str("LIMIT_RESET_HEADER")
		}
		r.envoy.Headers = h
	}
	r.redis, r.config = e.redis(logger)
	r.grpcTLS, r.xds, r.tracing = e.grpcTLS(), e.xds(), e.tracing()
	if len(e.errs) > 0 {
		return nil, errors.New(strings.Join(e.errs, "; "))
	}
	return r, nil
}

// redis reads the REDIS_* variables into the store's options, and the
// configuration that the server serves (the store section only: the
// domains are the Envoy files).
func (e *env) redis(logger *slog.Logger) (*redis.Options, *config.Config) {
	o := &redis.Options{Logger: logger, KeyPrefix: e.getenv("CACHE_KEY_PREFIX")}
	// REDIS_TIMEOUT bounds connecting and each call, as in the reference.
	o.DialTimeout = e.duration("REDIS_TIMEOUT")
	c := &config.Redis{Deadline: o.DialTimeout, KeyPrefix: o.KeyPrefix}
	if e.getenv("FLOODGATE_STORE_DEADLINE") != "" {
		c.Deadline = e.duration("FLOODGATE_STORE_DEADLINE")
	}
	url := e.str("REDIS_URL")
	switch kind := strings.ToUpper(e.str("REDIS_TYPE")); kind {
	case "SINGLE":
		switch socket := strings.ToLower(e.str("REDIS_SOCKET_TYPE")); {
		case strings.Contains(url, "://"):
			o.URL = url
		case socket == "unix" && isHostPort(url):
			e.errs = append(e.errs, fmt.Sprintf("REDIS_URL=%q is a host:port, but REDIS_SOCKET_TYPE is unix (%s): set REDIS_SOCKET_TYPE=tcp",
				url, map[bool]string{true: "the reference's default when it is unset", false: "as set"}[e.getenv("REDIS_SOCKET_TYPE") == ""]))
		case socket == "unix":
			o.URL = "unix://" + url
		case socket == "tcp":
			o.URL = "redis://" + url
		default:
			e.errs = append(e.errs, fmt.Sprintf("REDIS_SOCKET_TYPE=%q: want tcp or unix", socket))
		}
		c.URL = redactURL(o.URL)
	case "CLUSTER":
		o.Cluster = splitList(url)
		c.Cluster = o.Cluster
	case "SENTINEL":
		parts := splitList(url)
		if len(parts) < 2 {
			e.errs = append(e.errs, fmt.Sprintf("REDIS_URL=%q: with REDIS_TYPE=SENTINEL, want master,sentinel1,sentinel2,...", url))
			break
		}
		o.Sentinel = &redis.Sentinel{Master: parts[0], Addrs: parts[1:], Password: e.getenv("REDIS_SENTINEL_AUTH")}
		c.Sentinel = &config.Sentinel{Master: parts[0], Addrs: parts[1:]}
	default:
		e.errs = append(e.errs, fmt.Sprintf("REDIS_TYPE=%q: want SINGLE, SENTINEL or CLUSTER", kind))
	}
	if auth := e.getenv("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			o.Username, o.Password = user, pass
		} else {
			o.Password = auth
		}
	}
	if n := e.integer("LOCAL_CACHE_SIZE_IN_BYTES"); n > 0 {
		c.DenyCacheSize = max(1, n/64)
	}
	o.MaxFlushDelay = e.duration("REDIS_PIPELINE_WINDOW")
	if e.boolean("REDIS_TLS") {
		o.TLS = e.redisTLS()
	}
	return o, &config.Config{File: "the reference service's environment", Store: config.Store{Redis: c}}
}

// boundAddr is the address ln listens on as the operator asked for it:
// the requested host (0.0.0.0 stays 0.0.0.0, where Go's dual-stack
// listener reports [::]) with the bound port (a requested port 0 is
// chosen by the system).
func boundAddr(requested string, ln net.Listener) string {
	host, _, err := net.SplitHostPort(requested)
	_, port, perr := net.SplitHostPort(ln.Addr().String())
	if err != nil || perr != nil {
		return ln.Addr().String()
	}
	return net.JoinHostPort(host, port)
}

// isHostPort reports whether s is a host and a port number, not a socket
// path.
func isHostPort(s string) bool {
	if strings.HasPrefix(s, "/") {
		return false
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	_, err = strconv.Atoi(port)
	return err == nil
}

// redisTLS builds the TLS configuration of REDIS_TLS_*.
func (e *env) redisTLS() *tls.Config {
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if cert, key := e.getenv("REDIS_TLS_CLIENT_CERT"), e.getenv("REDIS_TLS_CLIENT_KEY"); cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			e.errs = append(e.errs, fmt.Sprintf("REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY: %v", err))
		}
		t.Certificates = []tls.Certificate{pair}
	}
	if ca := e.getenv("REDIS_TLS_CACERT"); ca != "" {
		pem, err := os.ReadFile(ca)
		pool := x509.NewCertPool()
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			e.errs = append(e.errs, fmt.Sprintf("REDIS_TLS_CACERT=%q: no PEM certificate could be read (%v)", ca, err))
		}
		t.RootCAs = pool
	}
	if e.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
		// Verify the chain against the roots, but not the name.
		roots := t.RootCAs
		t.InsecureSkipVerify = true
		t.VerifyConnection = func(cs tls.ConnectionState) error {
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return t
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// redactURL drops a URL's credentials, for logs.
func redactURL(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***@" + u[i+1:]
		}
	}
	return u
}

// runReference serves until ctx ends or a signal stops it.
func (m *Main) runReference(ctx context.Context, r *reference) error {
	logger := r.logger
	store, err := redis.New(r.redis)
	if err != nil {
		return fmt.Errorf("redis (%s): %w", describeRedis(r.config.Store.Redis), err)
	}
	defer store.Close()
	if len(r.redis.Cluster) > 0 && !store.Cluster() {
		logger.Warn("REDIS_TYPE=CLUSTER, but Redis is not a Cluster (cluster_enabled:0): floodgate uses it as a single node; set REDIS_TYPE=SINGLE (and REDIS_SOCKET_TYPE=tcp)",
			"redis", describeRedis(r.config.Store.Redis))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv := &server.Server{
		Config:           r.config,
		WatchConfig:      true,
		Store:            withDenyCache(store, r.config.Store.Redis.DenyCacheSize),
		HTTPAddr:         r.httpAddr,
		GRPCAddr:         r.grpcAddr,
		GRPCTLS:          r.grpcTLS,
		EnvoyRemoveAfter: r.removeAfter,
		Envoy:            r.envoy,
		AdminToken:       m.Getenv("FLOODGATE_ADMIN_TOKEN"),
		TicketSecret:     []byte(m.Getenv("FLOODGATE_TICKET_SECRET")),
		Registerer:       reg,
		Gatherer:         reg,
		Logger:           logger,
	}
	if srv.AdminToken == "" {
		logger.Info(adminOff(srv, "FLOODGATE_ADMIN_TOKEN"))
	}
	source := r.dir
	if r.xds != nil {
		srv.EnvoyXDS, source = r.xds, "xds "+r.xds.Server
	} else {
		srv.EnvoyConfigDir = r.dir
	}
	if r.tracing != nil {
		tp, err := newTracerProvider(ctx, r.tracing, m.Getenv, logger)
		if err != nil {
			return err
		}
		defer shutdownTracing(tp, logger)
		if tp != nil {
			srv.TracerProvider = tp
		}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// The root's target is read before the configuration is, so that a
	// swap while the service starts is seen as one.
	target, _ := filepath.EvalSymlinks(r.dir)
	if err := srv.Open(); err != nil {
		return err
	}
	// The debug listener and the Prometheus one.
	extra := []*http.Server{}
	listen := func(name, addr string, h http.Handler) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s listener: %w", name, err)
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
		extra = append(extra, hs)
		go hs.Serve(ln)
		logger.Info(name+" listener", "addr", boundAddr(addr, ln))
		return nil
	}
	defer func() {
		for _, hs := range extra {
			hs.Close()
		}
	}()
	if err := listen("debug", r.debugAddr, srv.DebugHandler()); err != nil {
		srv.Close()
		return err
	}
	if r.promAddr != "" {
		mux := http.NewServeMux()
		mux.Handle(r.promPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		if err := listen("prometheus", r.promAddr, mux); err != nil {
			srv.Close()
			return err
		}
	}
	stopRoot := make(chan struct{})
	defer close(stopRoot)
	if r.watchRoot && r.xds == nil {
		go followRoot(r.dir, target, srv, logger, stopRoot)
	}
	// Logged at warn, the reference's default level, like its listening
	// lines; tests wait for it.
	logger.Warn("listening", "http", srv.HTTPAddress(), "grpc", srv.GRPCAddress(), "debug", r.debugAddr,
		"envoy_config", source, "grpc_tls", r.grpcTLS != nil, "store", describeRedis(r.config.Store.Redis), "mode", "reference environment")
	for {
		select {
		case <-ctx.Done():
			return shutdown(srv, logger, "context done", 0, sigs)
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				srv.Reload()
				continue
			}
			return shutdown(srv, logger, sig.String(), 0, sigs)
		}
	}
}

// rootPoll is how often followRoot looks for a swapped runtime root.
const rootPoll = time.Second

// followRoot reloads srv when the configuration directory's real path
// changes from last: the runtime root is a symbolic link that a deployment
// swaps to a new version (RUNTIME_WATCH_ROOT), which the directory's own
// watch cannot see.
func followRoot(dir, last string, srv *server.Server, logger *slog.Logger, stop <-chan struct{}) {
	t := time.NewTicker(rootPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			cur, err := filepath.EvalSymlinks(dir)
			if err != nil || cur == last {
				continue
			}
			last = cur
			logger.Info("runtime root swapped; reloading", "dir", dir, "target", cur)
			srv.Reload()
		}
	}
}

// describeRedis names where the store connects, without credentials.
func describeRedis(c *config.Redis) string {
	switch {
	case c.URL != "":
		return c.URL
	case len(c.Cluster) > 0:
		return "cluster " + strings.Join(c.Cluster, ",")
	case c.Sentinel != nil:
		return "sentinel " + c.Sentinel.Master
	}
	return "redis"
}
