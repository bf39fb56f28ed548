package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

func getenvOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// The reference's variables become floodgate's settings.
func TestReadReference(t *testing.T) {
	var logs bytes.Buffer
	r, err := readReference(getenvOf(map[string]string{
		"HOST": "127.0.0.1", "PORT": "9000", "GRPC_PORT": "9001", "DEBUG_HOST": "::1", "DEBUG_PORT": "9002",
		"RUNTIME_ROOT": "/srv/rt", "RUNTIME_SUBDIRECTORY": "ratelimit",
		"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster, s1:26379,s2:26379", "REDIS_AUTH": "user:pw", "REDIS_SENTINEL_AUTH": "spw",
		"LOCAL_CACHE_SIZE_IN_BYTES": "6400", "CACHE_KEY_PREFIX": "rl:", "REDIS_PIPELINE_WINDOW": "150us", "REDIS_TIMEOUT": "3s",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":9999", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset",
		"SHADOW_MODE": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true", "USE_STATSD": "false", "LOG_LEVEL": "debug",
	}), &logs)
	if err != nil {
		t.Fatal(err)
	}
	if r.httpAddr != "127.0.0.1:9000" || r.grpcAddr != "0.0.0.0:9001" || r.debugAddr != "[::1]:9002" {
		t.Errorf("addresses %s %s %s", r.httpAddr, r.grpcAddr, r.debugAddr)
	}
	if r.dir != "/srv/rt/ratelimit/config" || !r.watchRoot || r.promAddr != ":9999" || r.promPath != "/metrics" {
		t.Errorf("dir %q watchRoot %v prometheus %q %q", r.dir, r.watchRoot, r.promAddr, r.promPath)
	}
	o := r.redis
	if o.Sentinel == nil || o.Sentinel.Master != "mymaster" || strings.Join(o.Sentinel.Addrs, ",") != "s1:26379,s2:26379" || o.Sentinel.Password != "spw" ||
		o.Username != "user" || o.Password != "pw" || r.config.Store.Redis.DenyCacheSize != 100 || o.KeyPrefix != "rl:" ||
		o.MaxFlushDelay != 150*time.Microsecond || o.DialTimeout != 3*time.Second {
		t.Errorf("redis options %+v", o)
	}
	if d := r.config.Store.Redis.Deadline; d != 3*time.Second {
		t.Errorf("store deadline %v, want REDIS_TIMEOUT", d)
	}
	h := r.envoy.Headers
	if h == nil || h.Limit != "RateLimit-Limit" || h.Reset != "X-Reset" || h.IETF || !r.envoy.Shadow || !r.envoy.RequireDomains {
		t.Errorf("envoy settings %+v %+v", r.envoy, h)
	}
	if !strings.Contains(logs.String(), "var=USE_STATSD") {
		t.Errorf("USE_STATSD=false not reported as ignored:\n%s", logs.String())
	}

	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, "redis://redis:6379"},
		{map[string]string{"REDIS_URL": "/run/redis.sock"}, "unix:///run/redis.sock"},
		{map[string]string{"REDIS_URL": "rediss://u:p@redis:6380/1"}, "rediss://u:p@redis:6380/1"},
	} {
		r, err := readReference(getenvOf(tc.env), &logs)
		if err != nil || r.redis.URL != tc.want {
			t.Errorf("%v: URL %q, %v; want %q", tc.env, r.redis.URL, err, tc.want)
		}
	}
	r, err = readReference(getenvOf(map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:1,b:2,c:3"}), &logs)
	if err != nil || strings.Join(r.redis.Cluster, ",") != "a:1,b:2,c:3" {
		t.Errorf("cluster: %v %v", r.redis.Cluster, err)
	}
	for env, want := range map[string]string{
		"LOG_LEVEL=loud":             `LOG_LEVEL="loud"`,
		"PORT=http":                  `PORT="http"`,
		"REDIS_TLS=yes":              `REDIS_TLS="yes"`,
		"QUOTA_MODE=true":            "QUOTA_MODE=true: not supported",
		"REDIS_TIMEOUT=soon":         `REDIS_TIMEOUT="soon"`,
		"GRPC_SERVER_USE_TLS=true":   "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
		"CONFIG_TYPE=GRPC_XDS_DELTA": `CONFIG_TYPE="GRPC_XDS_DELTA": want FILE or GRPC_XDS_SOTW`,
		"TRACING_ENABLED=true TRACING_EXPORTER_PROTOCOL=udp": `TRACING_EXPORTER_PROTOCOL="udp": want http (http/protobuf) or grpc`,
		// REDIS_SOCKET_TYPE unset is unix: a host:port says what to set,
		// rather than fail later as "dial unix: missing address".
		"REDIS_URL=redis:6379": `REDIS_URL="redis:6379" is a host:port, but REDIS_SOCKET_TYPE is unix (the reference's default when it is unset): set REDIS_SOCKET_TYPE=tcp`,
	} {
		vars := map[string]string{}
		for _, kv := range strings.Fields(env) {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		_, err := readReference(getenvOf(vars), &logs)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", env, err, want)
		}
	}
	if _, err := readReference(getenvOf(map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "only"}), &logs); err == nil {
		t.Error("a sentinel list without sentinels accepted")
	}
}

func TestReferenceModeDetection(t *testing.T) {
	if referenceMode(getenvOf(map[string]string{"HOST": "laptop", "PORT": "3000"})) {
		t.Error("HOST and PORT alone (common in shells) start the reference mode")
	}
	if !referenceMode(getenvOf(map[string]string{"REDIS_URL": "redis:6379"})) {
		t.Error("REDIS_URL does not start the reference mode")
	}
}

func TestReferenceArgs(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  string
	}{
		{"/bin/ratelimit", nil, "ratelimit"},
		{"/bin/ratelimit", []string{"-whatever"}, "ratelimit"},
		{"/usr/local/bin/floodgate", []string{"/bin/ratelimit"}, "ratelimit"},
		{"ratelimit", nil, "ratelimit"},
		// compose's command and Kubernetes' args follow the image's
		// entrypoint, floodgate serve.
		{"/usr/local/bin/floodgate", []string{"serve", "/bin/ratelimit"}, "ratelimit"},
		{"/usr/local/bin/floodgate", []string{"serve", "ratelimit"}, "ratelimit"},
		{"/usr/local/bin/floodgate", []string{"serve", "/bin/ratelimit", "-x"}, "ratelimit"},
		// The command itself keeps its flags.
		{"floodgate", []string{"ratelimit", "--help"}, "ratelimit --help"},
		{"floodgate", []string{"serve"}, "serve"},
		{"floodgate", []string{"serve", "--grpc", ":8081"}, "serve --grpc :8081"},
		{"floodgate", nil, ""},
	} {
		if got := strings.Join(referenceArgs(tc.argv0, tc.args), " "); got != tc.want {
			t.Errorf("referenceArgs(%q, %q) = %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}

// The debug and Prometheus listeners are logged as asked for: 0.0.0.0, as
// in the listening line, not the [::] of Go's dual-stack listener.
func TestBoundAddr(t *testing.T) {
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if got, want := boundAddr("0.0.0.0:0", ln), "0.0.0.0:"+port; got != want {
		t.Errorf("boundAddr(0.0.0.0:0) = %q (listener %s), want %q", got, ln.Addr(), want)
	}
}
