package loadgen

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Target names the API a run drives.
type Target string

// The targets a run can drive.
const (
	// HTTP is floodgate's HTTP JSON API: POST {Addr}/v1/check with
	// {"limiter":…,"attributes":{…},"cost":…}; a decision's "allowed" field
	// counts it as allowed or denied.
	HTTP Target = "http"
	// GRPC is Envoy's RateLimitService/ShouldRateLimit: one descriptor with
	// one entry per request; OK counts as allowed and OVER_LIMIT as denied.
	GRPC Target = "grpc"
)

// String returns the target's name; it makes *Target a flag.Value.
func (t *Target) String() string { return string(*t) }

// Set parses a target name ("http" or "grpc"); it makes *Target a flag.Value.
func (t *Target) Set(s string) error {
	switch v := Target(strings.ToLower(s)); v {
	case HTTP, GRPC:
		*t = v
		return nil
	}
	return fmt.Errorf("unknown target %q (want http or grpc)", s)
}

// Distribution says how request keys are drawn from the Keys distinct values.
type Distribution string

// The key distributions.
const (
	// Uniform draws every key with the same probability.
	Uniform Distribution = "uniform"
	// Zipf draws key i with a probability proportional to 1/(1+i)^s, so a
	// few hot keys take most of the traffic, as real users tend to.
	Zipf Distribution = "zipf"
)

// String returns the distribution's name; it makes *Distribution a flag.Value.
func (d *Distribution) String() string { return string(*d) }

// Set parses a distribution name ("uniform" or "zipf"); it makes
// *Distribution a flag.Value.
func (d *Distribution) Set(s string) error {
	switch v := Distribution(strings.ToLower(s)); v {
	case Uniform, Zipf:
		*d = v
		return nil
	}
	return fmt.Errorf("unknown key distribution %q (want uniform or zipf)", s)
}

// GRPCClient names the client a GRPC run sends its calls with.
type GRPCClient string

// The gRPC clients.
const (
	// WireClient speaks gRPC's HTTP/2 protocol itself, for the one call a
	// run makes, at a fraction of grpc-go's CPU cost per call: on a
	// machine the load generator shares with the service, what it spends
	// is taken from the service. It sends what grpc-go sends, but only
	// over plain-text HTTP/2 (h2c).
	WireClient GRPCClient = "wire"
	// GoClient is grpc-go's client (google.golang.org/grpc).
	GoClient GRPCClient = "grpc-go"
)

// String returns the client's name; it makes *GRPCClient a flag.Value.
func (g *GRPCClient) String() string { return string(*g) }

// Set parses a client name ("wire" or "grpc-go"); it makes *GRPCClient a
// flag.Value.
func (g *GRPCClient) Set(s string) error {
	switch v := GRPCClient(strings.ToLower(s)); v {
	case WireClient, GoClient:
		*g = v
		return nil
	}
	return fmt.Errorf("unknown gRPC client %q (want wire or grpc-go)", s)
}

// Defaults applied by Run to the zero fields of a Config.
const (
	DefaultLimiter          = "api"
	DefaultDomain           = "api"
	DefaultAttribute        = "user"
	DefaultKeyPrefix        = "user-"
	DefaultKeys             = 1000
	DefaultZipfS            = 1.1
	DefaultCost             = 1
	DefaultDuration         = 10 * time.Second
	DefaultRateConcurrency  = 256
	DefaultTimeout          = time.Second
	DefaultConns            = 2
	DefaultProgressInterval = time.Second
)

// Config describes one load run. Only Addr and either Rate or Concurrency
// must be set; every other zero field takes the default named
// in its comment. A Config is read, never modified, by Run.
type Config struct {
	// Target is the API to drive: HTTP (the default) or GRPC.
	Target Target
	// Addr is where the service listens. For HTTP, a base URL such as
	// "http://127.0.0.1:8080" (a bare host:port gets "http://"); for GRPC, a
	// gRPC target such as "127.0.0.1:8081".
	Addr string

	// Limiter is the limiter named in each HTTP request (default "api").
	Limiter string
	// Domain is the domain of each gRPC request (default "api").
	Domain string
	// Attribute is the request attribute (HTTP) or descriptor entry key
	// (gRPC) that carries the key (default "user").
	Attribute string
	// KeyPrefix is prepended to the key's number to form its value
	// (default "user-", giving user-0, user-1, …).
	KeyPrefix string
	// Keys is the number of distinct keys, the key cardinality (default 1000).
	Keys int
	// Distribution is how keys are drawn (default Uniform).
	Distribution Distribution
	// ZipfS is the Zipf exponent, which must be > 1 (default 1.1). Only used
	// with the Zipf distribution.
	ZipfS float64
	// Descriptors is how many descriptors each gRPC request carries
	// (default 1), each one entry with the request's key value: the first
	// keyed Attribute, the i-th Attribute followed by i (user, user2,
	// user3), so that a domain can give each its own limit.
	Descriptors int
	// Cost is the cost (HTTP) or hits_addend (gRPC) of each request
	// (default 1).
	Cost int

	// Rate, when > 0, selects the open model: Rate requests per second are
	// issued on a fixed schedule, and latency is measured from each
	// request's intended send time.
	Rate float64
	// Concurrency is the number of workers. With Rate == 0 (the closed
	// model) it must be > 0: each worker sends a request, waits for its
	// answer and sends the next. With Rate > 0 it caps the requests in
	// flight (default 256); a request that finds every worker busy at the
	// end of the run is counted in Summary.Missed.
	Concurrency int
	// Duration is how long the measured part of the run lasts (default 10s).
	Duration time.Duration
	// Warmup, when > 0, runs the same load for this long before the
	// measured part; its results are discarded.
	Warmup time.Duration
	// Requests, when > 0, ends the measured part after this many requests
	// have been issued, even if Duration has not passed.
	Requests int64
	// Timeout bounds each request; a request that takes longer is an error
	// (default 1s).
	Timeout time.Duration
	// Conns is the number of gRPC connections the workers share (default 2).
	// HTTP keeps one connection per busy worker.
	Conns int
	// GRPCClient is the client GRPC runs call with (default WireClient).
	GRPCClient GRPCClient
	// Seed seeds the key draws, so runs can be repeated (0 is a valid seed).
	Seed uint64

	// Progress, when not nil, receives a progress line every
	// ProgressInterval: rewritten in place with \r when Progress is a
	// terminal, one line after another otherwise.
	Progress io.Writer
	// ProgressInterval is the time between progress lines (default 1s).
	ProgressInterval time.Duration
}

// RegisterFlags defines flags for c's fields on fs, with c's current values
// (or the package defaults, for zero fields) as the flags' defaults. It is a
// convenience for command-line programs; Progress is left to the caller.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := c.withDefaults()
	*c = d
	fs.Var(&c.Target, "target", "`API` to drive: http (POST /v1/check) or grpc (Envoy ShouldRateLimit)")
	fs.StringVar(&c.Addr, "addr", c.Addr, "service `address`: a base URL for http, host:port for grpc")
	fs.StringVar(&c.Limiter, "limiter", c.Limiter, "limiter `name` in HTTP requests")
	fs.StringVar(&c.Domain, "domain", c.Domain, "`domain` of gRPC requests")
	fs.StringVar(&c.Attribute, "attribute", c.Attribute, "`attribute` (HTTP) or descriptor entry key (gRPC) that carries the key")
	fs.StringVar(&c.KeyPrefix, "key-prefix", c.KeyPrefix, "`prefix` of key values")
	fs.IntVar(&c.Keys, "keys", c.Keys, "`n` distinct keys (the key cardinality)")
	fs.Var(&c.Distribution, "dist", "key `distribution`: uniform or zipf")
	fs.Float64Var(&c.ZipfS, "zipf-s", c.ZipfS, "Zipf `exponent` (> 1)")
	fs.IntVar(&c.Descriptors, "descriptors", c.Descriptors, "`n` descriptors per gRPC request, keyed attribute, attribute2, ... (each with the key's value)")
	fs.IntVar(&c.Cost, "cost", c.Cost, "`cost` (HTTP) or hits_addend (gRPC) of each request")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "send `n` requests per second on a fixed schedule (open model); 0: -concurrency workers back to back (closed model)")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "`n` workers (closed model); with -rate, the cap on requests in flight (256 if unset)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "`time` the measured run lasts")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "unmeasured warm-up `time` before the run")
	fs.Int64Var(&c.Requests, "requests", c.Requests, "stop after `n` requests (0: no limit)")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "per-request `timeout`")
	fs.IntVar(&c.Conns, "conns", c.Conns, "`n` gRPC connections shared by the workers")
	fs.Var(&c.GRPCClient, "grpc-client", "gRPC `client`: wire (h2c, cheap per call) or grpc-go")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "`seed` for key draws")
	fs.DurationVar(&c.ProgressInterval, "progress-interval", c.ProgressInterval, "`time` between progress lines")
}

// withDefaults returns a copy of c with every zero optional field set to its
// default. Concurrency is defaulted only for the open model.
func (c Config) withDefaults() Config {
	if c.Target == "" {
		c.Target = HTTP
	}
	if c.Limiter == "" {
		c.Limiter = DefaultLimiter
	}
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if c.Attribute == "" {
		c.Attribute = DefaultAttribute
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.Keys == 0 {
		c.Keys = DefaultKeys
	}
	if c.Distribution == "" {
		c.Distribution = Uniform
	}
	if c.ZipfS == 0 {
		c.ZipfS = DefaultZipfS
	}
	if c.Cost == 0 {
		c.Cost = DefaultCost
	}
	if c.Descriptors == 0 {
		c.Descriptors = 1
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Rate > 0 && c.Concurrency == 0 {
		c.Concurrency = DefaultRateConcurrency
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Conns == 0 {
		c.Conns = DefaultConns
	}
	if c.GRPCClient == "" {
		c.GRPCClient = WireClient
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	return c
}

// Validate reports every problem with c (after defaults are applied), joined
// into one error, or nil when c can be run.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("loadgen: "+format, args...))
	}
	if c.Target != HTTP && c.Target != GRPC {
		bad("unknown target %q (want http or grpc)", c.Target)
	}
	if c.Addr == "" {
		bad("addr is required")
	}
	if c.Keys < 0 {
		bad("keys must be > 0, got %d", c.Keys)
	}
	if c.Distribution != Uniform && c.Distribution != Zipf {
		bad("unknown key distribution %q (want uniform or zipf)", c.Distribution)
	}
	if c.Distribution == Zipf && !(c.ZipfS > 1) {
		bad("zipf exponent must be > 1, got %g", c.ZipfS)
	}
	if c.Descriptors < 0 || c.Descriptors > 1 && c.Target != GRPC {
		bad("descriptors must be ≥ 1, and more than 1 only with the grpc target; got %d", c.Descriptors)
	}
	if c.Cost < 0 || c.Cost > math.MaxUint32 {
		bad("cost must be between 1 and %d, got %d", uint32(math.MaxUint32), c.Cost)
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		bad("rate must be a finite number ≥ 0, got %g", c.Rate)
	}
	if c.Concurrency < 0 {
		bad("concurrency must be > 0, got %d", c.Concurrency)
	}
	if c.Rate == 0 && c.Concurrency == 0 {
		bad("set a rate (open model) or a concurrency (closed model)")
	}
	if c.Duration <= 0 {
		bad("duration must be > 0, got %v", c.Duration)
	}
	if c.Warmup < 0 {
		bad("warmup must be ≥ 0, got %v", c.Warmup)
	}
	if c.Requests < 0 {
		bad("requests must be ≥ 0, got %d", c.Requests)
	}
	if c.Timeout < 0 {
		bad("timeout must be > 0, got %v", c.Timeout)
	}
	if c.Conns < 0 {
		bad("conns must be > 0, got %d", c.Conns)
	}
	if c.GRPCClient != WireClient && c.GRPCClient != GoClient {
		bad("unknown gRPC client %q (want wire or grpc-go)", c.GRPCClient)
	}
	if c.ProgressInterval < 0 {
		bad("progress interval must be > 0, got %v", c.ProgressInterval)
	}
	return errors.Join(errs...)
}
