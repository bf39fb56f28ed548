// Package config reads the decision service's YAML configuration into
// floodgate's domain values: the store to use, the failure policy, and the
// limiters with their rules, overrides and tiers.
//
// Decoding is strict: an unknown key, a value of the wrong type or a rule
// floodgate.New would reject is an error that names the file, line, column
// and field, such as
//
//	floodgate.yaml:12:14: limiters[0].rules[1].window: must be at least 1ms, got 500µs
//
// The package only reads and checks configuration. It sets up no logging and
// no metrics, and it opens no store; docs/config.md is the reference of every
// key.
package config

import (
	"fmt"
	"sort"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/gateway"
	"github.com/floodgate-go/floodgate/store"
)

// MaxFileSize is the largest configuration file Load reads.
const MaxFileSize = 4 << 20

// DefaultMaxKeys is the memory store's key cap when store.memory.max_keys is
// not set.
const DefaultMaxKeys = 1_000_000

// Config is a whole, validated configuration.
type Config struct {
	// File is the name the configuration was read from, as used in errors.
	File string
	// Store says where rule state lives.
	Store Store
	// FailurePolicy is every limiter's policy unless it sets its own.
	FailurePolicy floodgate.FailurePolicy
	// Breaker tunes every limiter's circuit breaker unless it sets its own.
	Breaker store.BreakerOptions
	// Limiters are the configured limiters, in file order, with unique
	// names.
	Limiters []Limiter
	// TokenClasses price the token classes that POST /v1/record's usage
	// counts, in cost units per token; nil when none are configured.
	TokenClasses gateway.Weights
	// RemovedLimiters name the limiters a hot reload may drop. A reload
	// that would remove a serving limiter not named here is refused, so
	// that a file read half written cannot take limiters from their
	// clients. Starting the service ignores it.
	RemovedLimiters []string
	// Routes are the named candidate lists of POST /v1/select, in file
	// order, with unique names; every candidate names one of Limiters.
	Routes []Route
	// EnvoyXDS, when set (envoy.xds), receives the Envoy domains from an
	// xDS management server; limiters are then optional.
	EnvoyXDS *XDS
	// GRPCTLS, when set (grpc.tls), serves the gRPC listener over TLS of
	// its own.
	GRPCTLS *ListenerTLS
	// Tracing, when set (tracing), exports OpenTelemetry traces.
	Tracing *Tracing
}

// Store selects the store. Exactly one of Memory and Redis is set; Memory
// is the default.
type Store struct {
	Memory *Memory
	Redis  *Redis
}

// Memory configures the embedded in-memory store.
type Memory struct {
	// MaxKeys caps the keys held; default DefaultMaxKeys.
	MaxKeys int
}

// Redis configures the Redis store. Exactly one of URL, Cluster and
// Sentinel is set.
type Redis struct {
	// URL addresses a single node: redis://[user:password@]host:port/db
	// (rediss:// for TLS).
	URL string
	// Cluster lists seed addresses of a Redis Cluster.
	Cluster []string
	// Sentinel finds the primary through Redis Sentinel.
	Sentinel *Sentinel
	// Username and Password authenticate with Cluster and Sentinel
	// deployments (a URL carries its own).
	Username string
	Password string
	// Deadline bounds each store call; default guard.DefaultTimeout.
	// A limiter's own deadline overrides it.
	Deadline time.Duration
	// DB selects the database of a single node or Sentinel primary (a
	// URL's own /db is used when this is 0).
	DB int
	// KeyPrefix starts every key floodgate writes; default "fg:".
	KeyPrefix string
	// HashTag is what a key's Cluster hash tag covers: "rule" (the
	// default: each rule key its own slot) or "limiter" (all of a
	// limiter's keys in one slot, so each of its decisions is one atomic
	// script call in Cluster; for limiters with few keys).
	HashTag string
	// DenyCacheSize bounds the local over-limit cache: keys known to be
	// denied until a time are denied locally until then. 0 means the
	// store's default; -1 disables the cache.
	DenyCacheSize int
	// Fallback, when set, decides on per-instance memory limits while
	// Redis cannot answer, instead of the failure policy (store/guard's
	// Fallback; the breaker decides when Redis is tried again).
	Fallback *Fallback
}

// Fallback configures per-instance memory limits for while Redis cannot
// answer.
type Fallback struct {
	// Instances is how many instances share the limits: each limit is
	// divided by it (store/share).
	Instances int
	// MaxKeys caps the keys the fallback holds; 0 means
	// DefaultFallbackKeys.
	MaxKeys int
}

// DefaultFallbackKeys is the key cap of the fallback's memory store when
// fallback.max_keys is not set.
const DefaultFallbackKeys = 100_000

// Sentinel configures Redis Sentinel discovery.
type Sentinel struct {
	// Master is the monitored primary's name.
	Master string
	// Addrs lists the sentinels' addresses.
	Addrs []string
	// Password authenticates with the sentinels themselves.
	Password string
}

// Limiter is one configured limiter.
type Limiter struct {
	Name          string
	FailurePolicy floodgate.FailurePolicy
	// Shadow runs the whole limiter dark.
	Shadow bool
	// RequireKeys denies a request without the key of a keyed rule as
	// invalid instead of skipping the rule (floodgate.Options.RequireKeys).
	RequireKeys bool
	// Deadline bounds each call to a remote store (store/guard's
	// Timeout); 0 means the store's default.
	Deadline time.Duration
	// Breaker tunes the circuit breaker of a remote store's calls
	// (store/guard's Breaker).
	Breaker store.BreakerOptions
	// Rules are the limiter's rules, tiers already turned into overrides
	// (after the rule's explicit overrides, which therefore win).
	Rules []floodgate.Rule
	// TokenRules name the rules that weighted token usage is recorded
	// into; empty means all of them.
	TokenRules []string
}

// Options returns opts with the limiter's configured settings (failure
// policy, shadow and required keys) filled in. Its deadline and breaker are its store's
// (see store/guard).
func (l *Limiter) Options(opts floodgate.Options) floodgate.Options {
	opts.FailurePolicy = l.FailurePolicy
	opts.Shadow = l.Shadow
	opts.RequireKeys = l.RequireKeys
	return opts
}

// New builds the limiter on store. opts supplies what configuration does
// not hold (observer, logger, clock); Options fills in the rest.
func (l *Limiter) New(st store.Store, opts floodgate.Options) (*floodgate.Limiter, error) {
	o := l.Options(opts)
	return floodgate.New(l.Name, st, l.Rules, &o)
}

// Load reads and validates the configuration file at path. Errors are an
// ErrorList whose entries name path, line, column and field.
func Load(path string) (*Config, error) { return LoadWith(path, Options{}) }

// tooLarge is the error of a file over MaxFileSize; size says how large.
func tooLarge(name, size string) error {
	return ErrorList{{File: name, Msg: fmt.Sprintf("the file %s; a configuration may be at most %s", size, humanBytes(MaxFileSize))}}
}

// humanBytes writes a size the way people read it: 512 bytes, 4 MiB,
// 50.2 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	suffix := []string{"KiB", "MiB", "GiB", "TiB"}[i]
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), suffix)
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}

// Parse decodes and validates a configuration held in data. name is used in
// error messages (usually the file name).
func Parse(name string, data []byte) (*Config, error) { return ParseWith(name, data, Options{}) }

// ParseWith is Parse with options.
func ParseWith(name string, data []byte, o Options) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, tooLarge(name, "is larger than that")
	}
	d := &decoder{file: name, budget: maxNodes, opts: o}
	c := d.decode(data)
	if len(d.errs) > 0 {
		// Sections are decoded in dependency order (routes after
		// limiters); report in file order.
		sort.SliceStable(d.errs, func(i, j int) bool {
			a, b := d.errs[i], d.errs[j]
			return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
		})
		return nil, d.errs
	}
	return c, nil
}
