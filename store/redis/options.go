package redis

import (
	"crypto/tls"

	"log/slog"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// DefaultKeyPrefix is the prefix of every key a Store writes when
// Options.KeyPrefix is empty.
const DefaultKeyPrefix = "fg:"

// Options configure a Store. Every field is optional; the zero value
// connects to redis://127.0.0.1:6379/0.
type Options struct {
	// URL locates the server: redis://[user:password@]host:port[/db],
	// rediss:// for TLS, or unix:///path/to/redis.sock?db=N. Repeated
	// addr=host:port query parameters add Cluster seeds, and
	// master_set=name makes the address a Sentinel's. Default
	// "redis://127.0.0.1:6379/0" unless Cluster or Sentinel is set.
	URL string
	// Cluster lists seed addresses ("host:port") of a Redis Cluster. The
	// client discovers the other nodes and follows slot migrations.
	Cluster []string
	// Sentinel, when set, finds the master through Redis Sentinel.
	Sentinel *Sentinel

	// Username and Password authenticate (ACL user, or password only with
	// the default user). They override the URL's.
	Username string
	Password string
	// DB selects the database of a single node or Sentinel master; it
	// overrides the URL's. Cluster has only database 0.
	DB int
	// TLS, when set, encrypts connections with this configuration. A
	// rediss:// URL turns TLS on with the system roots.
	TLS *tls.Config
	// DialTimeout bounds connecting; 0 means 5s.
	DialTimeout time.Duration

	// PipelineMultiplex spreads auto-pipelined commands over 2^n
	// connections per node; 0 keeps the client's default (2 when
	// GOMAXPROCS > 1). More connections help when one connection's writes
	// saturate a core.
	PipelineMultiplex int
	// MaxFlushDelay makes the auto-pipeliner wait up to this long to
	// gather more commands into one write; 0 (the default) flushes as soon
	// as the connection is free, which gives the lowest latency.
	MaxFlushDelay time.Duration

	// MaxCoalesce is how many concurrent decisions may share one script
	// call on a single node or Sentinel master (Cluster decisions are not
	// coalesced). A decision is sent at once when few
	// calls are in flight; while they are, decisions queue and go out
	// together in the next call, in which each is applied atomically and
	// independently, exactly as alone. 0 means DefaultMaxCoalesce; 1 or
	// less turns coalescing off (one call per decision).
	MaxCoalesce int

	// KeyPrefix starts every key the store writes; default DefaultKeyPrefix.
	// It must not contain '{' or '}' (keys carry their own hash tags).
	KeyPrefix string

	// HashTag chooses what the Cluster hash tag of a key covers: TagRule
	// (the default) gives every rule key its own tag, spreading keys over
	// the Cluster; TagLimiter gives all of a limiter's keys one tag, the
	// limiter's name, so that every decision of the limiter is one atomic
	// script call in Cluster too, at the cost of putting all of the
	// limiter's keys (and load) on one Cluster node. Use TagLimiter for
	// limiters with few keys (gateway routes and candidates), not for
	// per-user limiters with millions of keys. It changes nothing outside
	// Cluster but the key names: switching it starts every limit afresh.
	HashTag HashTag

	// UseBatchTime makes the scripts use Batch.Now (the limiter's clock)
	// instead of the server's TIME. Tests use it to drive a Redis store
	// with a fake clock; in production leave it false, so instances with
	// skewed clocks agree.
	UseBatchTime bool

	// NodeBreaker tunes the circuit breaker each master of a Cluster has
	// in the store (see the package documentation), as
	// store.BreakerOptions tune a guard's (store/guard: Failures, Ratio,
	// Window, Cooldown and MaxCooldown, with the same defaults: at least 5
	// failures and half of a second's calls, a 250ms first cooldown growing
	// to 1s). Outside Cluster the guard's breaker alone guards the store.
	NodeBreaker store.BreakerOptions

	// Logger receives compensations that could not be applied and the
	// Cluster breakers' state changes; nil means slog.Default().
	Logger *slog.Logger
}

// HashTag says which part of a key is its Cluster hash tag; see
// Options.HashTag.
type HashTag int

const (
	// TagRule tags each rule key's data on its own:
	// prefix + "{limiter/rule:key}:" + suffix.
	TagRule HashTag = iota
	// TagLimiter tags all of a limiter's data with the limiter's name:
	// prefix + "{limiter}/rule:key:" + suffix.
	TagLimiter
)

// String returns "rule" or "limiter".
func (h HashTag) String() string {
	switch h {
	case TagRule:
		return "rule"
	case TagLimiter:
		return "limiter"
	}
	return "HashTag(" + strconv.Itoa(int(h)) + ")"
}

// Sentinel locates a master through Redis Sentinel.
type Sentinel struct {
	// Master is the name of the master set the sentinels monitor.
	Master string
	// Addrs are the sentinels' addresses ("host:port").
	Addrs []string
	// Username and Password authenticate to the sentinels (not to the
	// master: use Options.Username and Options.Password for that).
	Username string
	Password string
	// NoFailoverPause, when true, keeps the store from pausing the old
	// master's writes (CLIENT PAUSE ... WRITE, 3s) when a sentinel
	// starts promoting a replica of it. The pause keeps the charges made
	// until the sentinels announce the new master, about a second, from
	// being written to the old master and lost; meanwhile decisions
	// follow the failure policy. See docs/redis.md.
	NoFailoverPause bool
}
