package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/server"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/overlimit"
	"github.com/floodgate-go/floodgate/store/redis"
	"github.com/floodgate-go/floodgate/store/share"
)

const serveUsage = `
Usage: floodgate serve [flags]

Runs the decision service: the HTTP JSON API and /metrics on --http, gRPC
(health, and Envoy's rate limit API with --envoy-config-dir) on --grpc.

The configuration file is watched and reloaded when it changes, and on
SIGHUP; a broken file is rejected and the previous configuration keeps
serving. SIGTERM or SIGINT shuts down gracefully: readiness fails, after
--drain the listeners stop accepting, requests in flight finish (within
--shutdown-timeout), the store is closed, and the exit status is 0. A
second signal exits at once, with status 1.

Secrets are best passed in the environment: FLOODGATE_ADMIN_TOKEN and
FLOODGATE_TICKET_SECRET are read when the flags are not given.
`

// serveFlags are serve's settings.
type serveFlags struct {
	config          string
	httpAddr        string
	grpcAddr        string
	envoyDir        string
	adminToken      string
	ticketSecret    string
	logFormat       string
	logLevel        string
	tlsCert         string
	tlsKey          string
	shutdownTimeout time.Duration
	drain           time.Duration
	grpcWorkers     int
	watch           bool
	removeAfter     time.Duration
}

func (m *Main) serve(ctx context.Context, args []string) int {
	var f serveFlags
	fs := m.flagSet("serve", serveUsage)
	fs.StringVar(&f.config, "config", "", "configuration `file` (default ./floodgate.yaml if present, else a built-in sample)")
	fs.StringVar(&f.httpAddr, "http", firstNonEmpty(m.Getenv("FLOODGATE_HTTP"), server.DefaultHTTPAddr),
		"HTTP API listen `address` (port 0 picks a free port; $FLOODGATE_HTTP sets the default)")
	fs.StringVar(&f.grpcAddr, "grpc", firstNonEmpty(m.Getenv("FLOODGATE_GRPC"), server.DefaultGRPCAddr),
		`gRPC listen `+"`address`"+` ("-" disables gRPC; $FLOODGATE_GRPC sets the default)`)
	fs.StringVar(&f.envoyDir, "envoy-config-dir", "", "`directory` of Envoy rate limit service configuration files to serve over gRPC")
	fs.DurationVar(&f.removeAfter, "envoy-remove-after", server.DefaultEnvoyRemoveAfter, "how long an Envoy domain whose file is gone keeps its last limits before it is removed (0: at once)")
	fs.StringVar(&f.adminToken, "admin-token", "", "bearer `token` for admin endpoints (default $FLOODGATE_ADMIN_TOKEN; none disables them)")
	fs.StringVar(&f.ticketSecret, "ticket-secret", "", "`secret` that authenticates refund tickets (default $FLOODGATE_TICKET_SECRET, else random per process)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate `file` for both listeners (with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "TLS private key `file` for both listeners (with --tls-cert)")
	fs.IntVar(&f.grpcWorkers, "grpc-workers", server.DefaultGRPCStreamWorkers, "goroutines kept to serve gRPC calls (0: a new goroutine per call)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "how long to let requests in flight finish on shutdown")
	fs.DurationVar(&f.drain, "drain", 0, "on shutdown, how long to keep serving with readiness failing before the listeners close")
	fs.BoolVar(&f.watch, "watch", true, "reload the configuration file when it changes")
	if code, ok := m.parseArgs(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(m.Stderr, "floodgate serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	logger, err := newLogger(m.Stderr, f.logFormat, f.logLevel)
	if err != nil {
		fmt.Fprintf(m.Stderr, "floodgate serve: %v\n", err)
		return exitUsage
	}
	if err := m.runServe(ctx, f, logger); err != nil {
		var list config.ErrorList
		if errors.As(err, &list) {
			logger.Error("invalid configuration", "errors", len(list))
			for _, e := range list {
				fmt.Fprintln(m.Stderr, e)
			}
		} else {
			logger.Error("floodgate serve failed", "err", err)
		}
		return exitFail
	}
	return exitOK
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", format)
}

// loadConfig reads the configuration serve starts with, and returns the
// path to watch ("" for the built-in sample). With Envoy domains (envoy),
// a configuration that names only the store is valid.
func loadConfig(path string, envoy bool, logger *slog.Logger) (*config.Config, string, error) {
	if path = configFile(path); path == "" {
		logger.Info("no --config and no ./" + defaultConfigFile + ": serving the built-in sample configuration")
		c, err := config.Parse(sampleName, sampleConfig)
		return c, "", err
	}
	c, err := config.LoadWith(path, config.Options{EnvoyDomains: envoy})
	return c, path, err
}

func (m *Main) runServe(ctx context.Context, f serveFlags, logger *slog.Logger) error {
	c, path, err := loadConfig(f.config, f.envoyDir != "", logger)
	if err != nil {
		return err
	}
	store, fallback, closeStore, err := openStore(c, logger)
	if err != nil {
		return err
	}
	defer closeStore()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	adminToken := firstNonEmpty(f.adminToken, m.Getenv("FLOODGATE_ADMIN_TOKEN"))
	secret := firstNonEmpty(f.ticketSecret, m.Getenv("FLOODGATE_TICKET_SECRET"))
	srv := &server.Server{
		Config:            c,
		ConfigPath:        path,
		WatchConfig:       f.watch,
		Store:             store,
		Fallback:          fallback,
		HTTPAddr:          f.httpAddr,
		GRPCAddr:          f.grpcAddr,
		TLSCertFile:       f.tlsCert,
		TLSKeyFile:        f.tlsKey,
		AdminToken:        adminToken,
		TicketSecret:      []byte(secret),
		ShutdownTimeout:   f.shutdownTimeout,
		DrainPeriod:       f.drain,
		GRPCStreamWorkers: grpcWorkers(f.grpcWorkers),
		Registerer:        reg,
		Gatherer:          reg,
		Logger:            logger,
	}
	srv.EnvoyConfigDir = f.envoyDir
	srv.EnvoyRemoveAfter = removeAfter(f.removeAfter)
	flush, err := deploy(ctx, c, srv, m.Getenv, logger)
	if err != nil {
		return err
	}
	defer flush()
	if secret == "" {
		logger.Info("no ticket secret set: tickets refund only on this instance; set FLOODGATE_TICKET_SECRET on every instance sharing a store")
	}
	if adminToken == "" {
		logger.Info(adminOff(srv, "--admin-token or FLOODGATE_ADMIN_TOKEN"))
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	if err := srv.Open(); err != nil {
		return err
	}
	grpcAddr := srv.GRPCAddress()
	if grpcAddr == "" {
		grpcAddr = "disabled"
	}
	logger.Info("listening", "http", srv.HTTPAddress(), "grpc", grpcAddr,
		"config", c.File, "limiters", len(c.Limiters), "store", storeName(c), "tls", f.tlsCert != "")
	for {
		select {
		case <-ctx.Done():
			return shutdown(srv, logger, "context done", f.drain, sigs)
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if path == "" && f.envoyDir == "" {
					logger.Warn("SIGHUP: nothing to reload, the built-in sample configuration is serving")
					continue
				}
				logger.Info("SIGHUP: reloading the configuration", "file", path, "envoy_dir", f.envoyDir)
				srv.Reload()
				continue
			}
			return shutdown(srv, logger, sig.String(), f.drain, sigs)
		}
	}
}

// errForced is runServe's error when a second signal cut the shutdown
// short.
var errForced = errors.New("a second signal during shutdown: stopped without waiting for requests in flight")

// shutdown closes srv, and gives up at once on a second SIGINT or SIGTERM.
// Requests cut off by the shutdown timeout are logged, not an error: the
// shutdown went as configured.
func shutdown(srv *server.Server, logger *slog.Logger, why string, drain time.Duration, sigs <-chan os.Signal) error {
	logger.Info("shutting down", "reason", why, "drain", drain.String())
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	for {
		select {
		case err := <-closed:
			if errors.Is(err, server.ErrShutdownTimeout) {
				logger.Warn("shutdown timeout: requests still in flight were cut off")
				err = nil
			}
			logger.Info("stopped", "took", time.Since(start).Round(time.Millisecond).String())
			return err
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				return errForced
			}
		}
	}
}

// grpcWorkers maps --grpc-workers onto Server.GRPCStreamWorkers, where 0
// means the default and a negative value none.
func grpcWorkers(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func storeName(c *config.Config) string {
	if c.Store.Redis != nil {
		return "redis"
	}
	return "memory"
}

// openStore builds the store the configuration names, the fallback that
// decides while it cannot answer (nil for none), and the function that
// closes them.
func openStore(c *config.Config, logger *slog.Logger) (st, fallback store.Store, closeAll func(), err error) {
	r := c.Store.Redis
	if r == nil {
		s := memory.New(&memory.Options{MaxKeys: c.Store.Memory.MaxKeys})
		return s, nil, func() { s.Close() }, nil
	}
	st, closeRedis, err := openRedis(r, logger)
	if err != nil || r.Fallback == nil {
		return st, nil, closeRedis, err
	}
	keys := r.Fallback.MaxKeys
	if keys == 0 {
		keys = config.DefaultFallbackKeys
	}
	mem := memory.New(&memory.Options{MaxKeys: keys})
	if fallback, err = share.New(mem, r.Fallback.Instances); err != nil {
		mem.Close()
		closeRedis()
		return nil, nil, nil, err
	}
	return st, fallback, func() { closeRedis(); mem.Close() }, nil
}

// openRedis connects the Redis store. The per-call deadline is not the
// store's: it is each limiter's (store.redis.deadline by default).
func openRedis(r *config.Redis, logger *slog.Logger) (store.Store, func(), error) {
	opts := &redis.Options{
		URL:       r.URL,
		Cluster:   r.Cluster,
		Username:  r.Username,
		Password:  r.Password,
		DB:        r.DB,
		KeyPrefix: r.KeyPrefix,
		Logger:    logger,
	}
	if r.HashTag == "limiter" {
		opts.HashTag = redis.TagLimiter
	}
	if sn := r.Sentinel; sn != nil {
		opts.Sentinel = &redis.Sentinel{Master: sn.Master, Addrs: sn.Addrs, Password: sn.Password}
	}
	s, err := redis.New(opts)
	switch {
	case err != nil && r.Fallback != nil:
		// The fallback decides until Redis answers, as it does whenever
		// Redis is down.
		logger.Warn("floodgate: Redis unreachable at start: deciding on the fallback, dialling again every second",
			"redis", redisTarget(r), "err", withoutSecrets(err.Error(), r))
		l := dialLater(opts, err, func(msg string) string { return withoutSecrets(msg, r) }, logger)
		return withDenyCache(l, r.DenyCacheSize), func() { l.Close() }, nil
	case err != nil:
		return nil, nil, fmt.Errorf("store.redis (%s): %s", redisTarget(r), withoutSecrets(err.Error(), r))
	}
	if len(opts.Cluster) > 0 && !s.Cluster() {
		logger.Warn("store.redis.cluster names a Redis that is not a Cluster (cluster_enabled:0): floodgate uses it as a single node; set store.redis.url instead",
			"redis", redisTarget(r))
	}
	// The service puts each limiter's guard and quota grants on top.
	return withDenyCache(s, r.DenyCacheSize), func() { s.Close() }, nil
}

// withDenyCache puts the over-limit cache of store.redis.deny_cache_size in
// front of s: size keys (0: overlimit.DefaultSize), or none for -1.
func withDenyCache(s store.Store, size int) store.Store {
	if size < 0 {
		return s
	}
	return overlimit.New(s, &overlimit.Options{Size: size})
}

// redisTarget describes where the store connects, without credentials.
func redisTarget(r *config.Redis) string {
	switch {
	case r.URL != "":
		return config.RedactURL(r.URL)
	case len(r.Cluster) > 0:
		return "cluster " + strings.Join(r.Cluster, ",")
	case r.Sentinel != nil:
		return "sentinel " + r.Sentinel.Master
	}
	return "redis"
}

// withoutSecrets returns msg with r's passwords replaced by "xxxxx": an
// error from the store may quote its URL or options.
func withoutSecrets(msg string, r *config.Redis) string {
	var secrets []string
	if u, err := url.Parse(r.URL); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			secrets = append(secrets, pw, url.PathEscape(pw), url.QueryEscape(pw))
		}
	}
	secrets = append(secrets, r.Password)
	if r.Sentinel != nil {
		secrets = append(secrets, r.Sentinel.Password)
	}
	for _, pw := range secrets {
		if pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return msg
}

// removeAfter is server.Server.EnvoyRemoveAfter for a setting of d, where
// 0 (or less) removes a domain at once.
func removeAfter(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// adminOff is the start-up line of a service without an admin token: it
// names every admin endpoint, and how to turn them on.
func adminOff(srv *server.Server, how string) string {
	return "no admin token set: admin endpoints (" + strings.Join(srv.AdminEndpoints(), ", ") + ") are disabled; set " + how
}
