package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// How floodgate treats one of the reference service's environment
// variables (docs/envoy.md has the same table).
const (
	honoured = "honoured" // same meaning as in the reference service
	mapped   = "mapped"   // onto floodgate's nearest setting, as the note says
	ignored  = "ignored"  // no effect; logged with the note when set
	refused  = "refused"  // floodgate cannot do it: startup fails when set to a value other than the default
)

// envVar is an environment variable that floodgate ratelimit reads or
// knowingly ignores.
type envVar struct {
	name string
	def  string // the reference service's default
	use  string // honoured, mapped, ignored or refused
	note string
}

// referenceEnv lists the reference service's environment variables
// (src/settings/settings.go of github.com/envoyproxy/ratelimit), and
// floodgate's own, with what floodgate does with each.
var referenceEnv = []envVar{
	{"HOST", "0.0.0.0", honoured, "HTTP listener host (/healthcheck, /json, /metrics and floodgate's /v1 API)"},
	{"PORT", "8080", honoured, "HTTP listener port"},
	{"GRPC_HOST", "0.0.0.0", honoured, "gRPC listener host (ShouldRateLimit, gRPC health)"},
	{"GRPC_PORT", "8081", honoured, "gRPC listener port"},
	{"DEBUG_HOST", "0.0.0.0", honoured, "debug listener host (/rlconfig, /debug/pprof/)"},
	{"DEBUG_PORT", "6070", honoured, "debug listener port"},
	{"GRPC_UDS", "", refused, "floodgate listens for gRPC on TCP only"},
	{"GRPC_MAX_CONNECTION_AGE", "24h", ignored, "floodgate does not age gRPC connections out"},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", ignored, "floodgate does not age gRPC connections out"},
	{"GRPC_SERVER_USE_TLS", "false", honoured, "TLS on the gRPC listener; the HTTP listener (the probes' /healthcheck) stays plain text"},
	{"GRPC_SERVER_TLS_CERT", "", honoured, "the gRPC listener's certificate chain file, read again when it changes"},
	{"GRPC_SERVER_TLS_KEY", "", honoured, "its key file, read again when it changes"},
	{"GRPC_CLIENT_TLS_CACERT", "", honoured, "with it, clients must present a certificate that chains to these CA certificates"},
	{"GRPC_SERVER_TLS_CA_CERT", "", honoured, "floodgate only: Envoy Gateway's name for GRPC_CLIENT_TLS_CACERT (which the reference reads, and not this one): client certificates required"},
	{"GRPC_CLIENT_TLS_SAN", "", honoured, "a DNS name the client certificate must hold"},
	{"LOG_LEVEL", "WARN", honoured, "trace and debug log at debug, fatal and panic at error"},
	{"LOG_FORMAT", "text", honoured, "text or json (floodgate's field names)"},

	{"CONFIG_TYPE", "FILE", honoured, "FILE (the runtime directory) or GRPC_XDS_SOTW (an xDS management server, as Envoy Gateway runs it)"},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", honoured, "with GRPC_XDS_SOTW: healthy before the first push (decisions then answer the reference's \"no rate limit configuration loaded\"); without it /healthcheck fails until then. With FILE the directory is loaded before the listeners open"},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", honoured, "the node id the management server knows this service by"},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", honoured, "the node's metadata: key=value pairs, comma-separated"},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", honoured, "the management server's address"},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", ignored, "the waits between connection attempts follow XDS_CLIENT_BACKOFF_*"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", honoured, "gRPC metadata of the stream: key:value pairs, comma-separated"},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", honoured, "TLS to the management server"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", honoured, "client certificate file (mTLS), read again when it changes"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", honoured, "its key file"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", honoured, "CA certificates the management server's certificate must chain to (default: the system roots)"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", honoured, "the name the management server's certificate must hold, instead of its host"},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", mapped, "the first wait before reconnecting, doubling up to XDS_CLIENT_BACKOFF_MAX_INTERVAL; unset, floodgate starts at 1s"},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", honoured, "the longest wait before reconnecting"},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", ignored, "each wait is drawn between its half and itself"},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", ignored, "the waits are always jittered"},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", honoured, "the largest push accepted (default 4 MiB)"},

	{"USE_STATSD", "true", ignored, "statsd is not supported: floodgate's Prometheus metrics are at /metrics on PORT (and PROMETHEUS_ADDR)"},
	{"STATSD_HOST", "localhost", ignored, "statsd is not supported"},
	{"STATSD_PORT", "8125", ignored, "statsd is not supported"},
	{"USE_DOG_STATSD", "false", ignored, "statsd is not supported"},
	{"USE_DOG_STATSD_MOGRIFIERS", "", ignored, "statsd is not supported"},
	{"EXTRA_TAGS", "", ignored, "statsd is not supported; Prometheus labels are floodgate's"},
	{"STATS_FLUSH_INTERVAL", "10s", ignored, "Prometheus is scraped, not flushed"},
	{"DISABLE_STATS", "false", ignored, "the metrics cost nothing until scraped"},
	{"USE_PROMETHEUS", "false", honoured, "also serve the metrics at PROMETHEUS_ADDR and PROMETHEUS_PATH (floodgate's metric names, docs/metrics.md)"},
	{"PROMETHEUS_ADDR", ":9090", honoured, "with USE_PROMETHEUS"},
	{"PROMETHEUS_PATH", "/metrics", honoured, "with USE_PROMETHEUS"},
	{"PROMETHEUS_MAPPER_YAML", "", ignored, "accepted and not read: floodgate's metrics are Prometheus-native, under the names docs/metrics.md lists, with no statsd names to map"},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", ignored, "floodgate's latency histograms are in seconds"},

	{"RUNTIME_ROOT", "/srv/runtime_data/current", honoured, "the configuration directory is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"},
	{"RUNTIME_SUBDIRECTORY", "", honoured, "see RUNTIME_ROOT"},
	{"RUNTIME_APPDIRECTORY", "config", honoured, "see RUNTIME_ROOT"},
	{"RUNTIME_IGNOREDOTFILES", "false", mapped, "floodgate never reads dot files (a ConfigMap's ..data entries would be read twice)"},
	{"RUNTIME_WATCH_ROOT", "true", honoured, "true: also reload when RUNTIME_ROOT (a symbolic link) is swapped; the directory's files are always watched"},

	{"BACKEND_TYPE", "redis", refused, "only redis: floodgate has no memcache store"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", ignored, "floodgate's keys expire with their window"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", mapped, "floodgate's local over-limit cache, one entry per 64 bytes; 0 keeps its default size (store.redis.deny_cache_size)"},
	{"NEAR_LIMIT_RATIO", "0.8", ignored, "near-limit statistics are not kept"},
	{"CACHE_KEY_PREFIX", "", mapped, "the prefix of floodgate's Redis keys (default fg:)"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", mapped, "floodgate charges a refused hit only to the limits that refused it, as the reference does with this set to true"},

	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", honoured, "quota headers in response_headers_to_add"},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", honoured, "with LIMIT_RESPONSE_HEADERS_ENABLED"},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", honoured, "with LIMIT_RESPONSE_HEADERS_ENABLED"},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", honoured, "with LIMIT_RESPONSE_HEADERS_ENABLED"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", honoured, "/healthcheck fails while no domain is loaded"},

	{"REDIS_SOCKET_TYPE", "unix", honoured, "tcp or unix; unix (the default) with a host:port REDIS_URL stops the start, saying to set tcp"},
	{"REDIS_TYPE", "SINGLE", honoured, "SINGLE, SENTINEL (REDIS_URL is master,sentinel1,...) or CLUSTER (REDIS_URL lists seed nodes; a Redis that is not a Cluster is used as a single node, with a warning)"},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", honoured, "host:port, a socket path, or a comma-separated list; redis:// URLs too"},
	{"REDIS_AUTH", "", honoured, "password, or user:password"},
	{"REDIS_SENTINEL_AUTH", "", honoured, "the sentinels' password"},
	{"REDIS_TLS", "false", honoured, "TLS to Redis"},
	{"REDIS_TLS_CLIENT_CERT", "", honoured, "client certificate file, with REDIS_TLS_CLIENT_KEY"},
	{"REDIS_TLS_CLIENT_KEY", "", honoured, "client key file"},
	{"REDIS_TLS_CACERT", "", honoured, "CA certificate file (default: the system roots)"},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", honoured, "verify the chain, not the name"},
	{"REDIS_POOL_SIZE", "10", ignored, "floodgate's client pipelines over a few connections: there is no pool to size"},
	{"REDIS_PIPELINE_WINDOW", "0", mapped, "how long the client may wait to gather commands into one write"},
	{"REDIS_PIPELINE_LIMIT", "0", ignored, "deprecated in the reference; the client pipelines automatically"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", ignored, "the client sends to every Cluster node in parallel"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", ignored, "GET /readyz reports whether Redis answers"},
	{"REDIS_TIMEOUT", "10s", honoured, "bounds connecting and each store call (a decision then fails open), unless FLOODGATE_STORE_DEADLINE is set"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", ignored, "there is no pool"},
	{"REDIS_STARTUP_INITIAL_INTERVAL", "1s", ignored, "floodgate does not wait for Redis at startup: it fails, and the orchestrator restarts it"},
	{"REDIS_STARTUP_MAX_INTERVAL", "30s", ignored, "see REDIS_STARTUP_INITIAL_INTERVAL"},
	{"REDIS_STARTUP_MAX_ELAPSED_TIME", "0", ignored, "see REDIS_STARTUP_INITIAL_INTERVAL"},
	{"REDIS_PERSECOND", "false", ignored, "floodgate keeps one store: per-second limits are counted in the REDIS_URL Redis with the others"},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_TYPE", "SINGLE", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_POOL_SIZE", "10", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_AUTH", "", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_TLS", "false", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_TIMEOUT", "10s", ignored, "see REDIS_PERSECOND"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", ignored, "see REDIS_PERSECOND"},

	{"MEMCACHE_HOST_PORT", "", ignored, "floodgate has no memcache store (see BACKEND_TYPE)"},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", ignored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_SRV", "", ignored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_SRV_REFRESH", "0", ignored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS", "false", ignored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS_CLIENT_CERT", "", ignored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS_CLIENT_KEY", "", ignored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS_CACERT", "", ignored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", ignored, "see MEMCACHE_HOST_PORT"},

	{"SHADOW_MODE", "false", honoured, "global shadow mode: statuses as decided, overall_code always OK"},
	{"QUOTA_MODE", "false", refused, "floodgate has no quota mode"},
	{"RESPONSE_DYNAMIC_METADATA", "false", ignored, "floodgate returns no dynamic metadata"},
	{"MERGE_DOMAIN_CONFIG", "false", ignored, "floodgate never merges: a domain in two files is an error"},
	{"TRACING_ENABLED", "false", honoured, "OpenTelemetry traces over OTLP to OTEL_EXPORTER_OTLP_ENDPOINT: a span per decision and per store call"},
	{"TRACING_SERVICE_NAME", "RateLimit", honoured, "service.name; unset, OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names the service first"},
	{"TRACING_SERVICE_NAMESPACE", "", honoured, "service.namespace"},
	{"TRACING_SERVICE_INSTANCE_ID", "", honoured, "service.instance.id (default: a random id per process)"},
	{"TRACING_EXPORTER_PROTOCOL", "http", honoured, "http (OTLP/HTTP protobuf) or grpc; unset, OTEL_EXPORTER_OTLP_PROTOCOL decides first"},
	{"TRACING_SAMPLING_RATE", "1", honoured, "share of the traces sampled (a caller's sampled traceparent is followed); unset, OTEL_TRACES_SAMPLER decides first"},

	// floodgate's own.
	{"FLOODGATE_STORE_DEADLINE", "", honoured, "floodgate only: how long a decision waits for Redis before the failure policy (open) decides; default REDIS_TIMEOUT"},
	{"FLOODGATE_ENVOY_REMOVE_AFTER", "30s", honoured, "floodgate only: how long a domain whose file is gone keeps its last limits before it is removed (the reference drops it at once); `0` removes it at once"},
	{"FLOODGATE_IETF_HEADERS", "false", honoured, "floodgate only: add the IETF RateLimit and RateLimit-Policy pair to the answers"},
	{"FLOODGATE_ADMIN_TOKEN", "", honoured, "floodgate only: bearer token of the admin endpoints"},
	{"FLOODGATE_TICKET_SECRET", "", honoured, "floodgate only: secret of refund tickets (floodgate's /v1 API)"},
}

// knownEnvVar reports whether floodgate reads, or knowingly ignores, the
// environment variable name: the reference service's variables and
// floodgate's own. The Go runtime's (GOMAXPROCS, GOMEMLIMIT, GOGC,
// GODEBUG) and OpenTelemetry's (OTEL_*) are known too.
func knownEnvVar(name string) bool {
	switch name {
	case "GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG":
		return true
	}
	if strings.HasPrefix(name, "OTEL_") {
		return true // OpenTelemetry's own, read by its SDK (docs/envoy.md)
	}
	return lookupEnvVar(name) != nil
}

func lookupEnvVar(name string) *envVar {
	for i := range referenceEnv {
		if referenceEnv[i].name == name {
			return &referenceEnv[i]
		}
	}
	return nil
}

// env reads the reference service's variables, with its defaults, and
// collects what cannot be read.
type env struct {
	getenv func(string) string
	errs   []string
}

// str returns the variable's value, or the reference's default.
func (e *env) str(name string) string {
	if v := e.getenv(name); v != "" {
		return v
	}
	if v := lookupEnvVar(name); v != nil {
		return v.def
	}
	panic("floodgate: unknown reference variable " + name) // a typo in this file
}

// boolean parses as the reference does (strconv.ParseBool).
func (e *env) boolean(name string) bool {
	s := e.str(name)
	v, err := strconv.ParseBool(s)
	if err != nil {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q: want true or false", name, s))
	}
	return v
}

func (e *env) integer(name string) int {
	s := e.str(name)
	v, err := strconv.Atoi(s)
	if err != nil {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q: want a whole number", name, s))
	}
	return v
}

// duration parses a Go duration, or a number of nanoseconds, as the
// reference's envconfig does.
func (e *env) duration(name string) time.Duration {
	s := e.str(name)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(n)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q: want a duration such as 150us or 10s", name, s))
	}
	return d
}

// port reads a port number.
func (e *env) port(name string) string {
	p := e.integer(name)
	if p < 0 || p > 65535 {
		e.errs = append(e.errs, fmt.Sprintf("%s=%d: want a port from 0 to 65535", name, p))
	}
	return strconv.Itoa(p)
}

// set reports whether the variable is set to something other than the
// reference's default (case aside).
func (e *env) set(name string) bool {
	v := e.getenv(name)
	return v != "" && !strings.EqualFold(v, lookupEnvVar(name).def)
}
