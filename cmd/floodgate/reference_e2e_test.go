package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/syncbuf"
	"github.com/floodgate-go/floodgate/internal/testcert"
)

// The cases of the reference service's integration test
// (test/integration/integration_test.go of github.com/envoyproxy/ratelimit),
// run against floodgate with the same runtime files (testdata/reference,
// see its NOTICE): through floodgate serve on memory and on Redis, and
// through floodgate started with the reference's environment alone.

// refRuntime copies the reference's runtime tree into a fresh directory
// and returns RUNTIME_ROOT (".../current").
func refRuntime(t *testing.T) string {
	t.Helper()
	src := filepath.Join("testdata", "reference", "runtime")
	dst := t.TempDir()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dst, "current")
}

// refTarget is a floodgate serving the reference's runtime files.
type refTarget struct {
	t     *testing.T
	c     rlsv3.RateLimitServiceClient
	conn  *grpc.ClientConn
	http  string // base URL
	root  string // RUNTIME_ROOT
	local bool   // the "_local" keys, as the reference names them with a local cache
}

func newRefTarget(t *testing.T, grpcAddr, httpURL, root string, local bool) *refTarget {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &refTarget{t: t, c: rlsv3.NewRateLimitServiceClient(conn), conn: conn, http: httpURL, root: root, local: local}
}

// key is the reference's getCacheKey: "_local" appended with a local cache.
func (r *refTarget) key(k string) string {
	if r.local {
		return k + "_local"
	}
	return k
}

// ask sends one request; each descriptor is key, value pairs.
func (r *refTarget) ask(domain string, descs ...[]string) *rlsv3.RateLimitResponse {
	r.t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1}
	for _, kv := range descs {
		req.Descriptors = append(req.Descriptors, desc(kv...))
	}
	resp, err := r.c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		r.t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	if len(resp.Statuses) != len(descs) {
		r.t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(descs))
	}
	return resp
}

// refStatus is what the reference's newDescriptorStatus builds: a code, a
// limit (0: none), what is left, and a reset in whole seconds within the
// unit.
type refStatus struct {
	code      rlsv3.RateLimitResponse_Code
	rpu       uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
}

var unitLength = map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{
	rlsv3.RateLimitResponse_RateLimit_SECOND: 1, rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
	rlsv3.RateLimitResponse_RateLimit_HOUR: 3600, rlsv3.RateLimitResponse_RateLimit_DAY: 86400,
}

func (r *refTarget) expect(what string, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, want ...refStatus) {
	r.t.Helper()
	if resp.OverallCode != overall {
		r.t.Errorf("%s: overall_code %v, want %v (%v)", what, resp.OverallCode, overall, resp)
	}
	for i, w := range want {
		s := resp.Statuses[i]
		if s.Code != w.code || s.LimitRemaining != w.remaining {
			r.t.Errorf("%s: status %d is %v with %d left, want %v with %d left", what, i, s.Code, s.LimitRemaining, w.code, w.remaining)
		}
		if w.rpu == 0 && w.unit == 0 {
			if s.CurrentLimit != nil || s.DurationUntilReset != nil {
				r.t.Errorf("%s: status %d has a limit (%v), want none", what, i, s)
			}
			continue
		}
		if s.CurrentLimit.GetRequestsPerUnit() != w.rpu || s.CurrentLimit.GetUnit() != w.unit {
			r.t.Errorf("%s: status %d limit %v, want %d per %v", what, i, s.CurrentLimit, w.rpu, w.unit)
		}
		// The reference's reset: the unit less the seconds elapsed in it.
		if d := s.DurationUntilReset; d.GetNanos() != 0 || d.GetSeconds() < 1 || d.GetSeconds() > unitLength[w.unit] {
			r.t.Errorf("%s: status %d duration_until_reset %v, want 1 to %d whole seconds", what, i, d.AsDuration(), unitLength[w.unit])
		}
	}
}

// awayFromMinuteEdge waits out the last seconds of a minute, so that a run
// of requests against a per-minute limit stays in one window, as the
// reference's test silently assumes.
func awayFromMinuteEdge() {
	if now := time.Now(); now.Second() >= 55 {
		time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 50*time.Millisecond).Sub(now))
	}
}

func unique() string { return strconv.FormatInt(time.Now().UnixNano(), 10) }

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
)

// basic is the reference's testBasicBaseConfig, less its statsd counters.
func (r *refTarget) basic() {
	t := r.t
	r.expect("unknown domain", r.ask("foo", []string{r.key("hello"), "world"}), ok, refStatus{code: ok})
	r.expect("basic key1", r.ask("basic", []string{r.key("key1"), "foo"}), ok, refStatus{ok, 50, second, 49})

	awayFromMinuteEdge()
	v := unique()
	for i := range 25 {
		want := refStatus{ok, 20, minute, uint32(19 - i)}
		code := ok
		if i >= 20 {
			want, code = refStatus{over, 20, minute, 0}, over
		}
		r.expect(fmt.Sprintf("key2 request %d", i+1), r.ask("another", []string{r.key("key2"), v}), code, want)
	}

	// Two limits in one domain. Over on key3 (10 per hour), the request
	// charges key2 nothing: key2 keeps 10 left. The reference does this
	// with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; floodgate always does
	// (docs/envoy.md), so without that setting the reference would say
	// 20 - (i+1) for key2 where floodgate says 10.
	awayFromMinuteEdge()
	v = unique()
	for i := range 15 {
		key2 := refStatus{ok, 20, minute, uint32(19 - i)}
		key3 := refStatus{ok, 10, hour, uint32(9 - i)}
		code := ok
		if i >= 10 {
			key2.remaining, key3, code = 10, refStatus{over, 10, hour, 0}, over
		}
		r.expect(fmt.Sprintf("key2+key3 request %d", i+1), r.ask("another", []string{r.key("key2"), v}, []string{r.key("key3"), v}), code, key2, key3)
	}

	// duration_until_reset counts down, in whole seconds.
	awayFromMinuteEdge() // and so from a day's edge
	first := r.ask("another", []string{r.key("key4"), "durTest"}).Statuses[0].DurationUntilReset.GetSeconds()
	time.Sleep(1100 * time.Millisecond)
	if second := r.ask("another", []string{r.key("key4"), "durTest"}).Statuses[0].DurationUntilReset.GetSeconds(); second >= first {
		t.Errorf("duration_until_reset went from %ds to %ds over a second", first, second)
	}
}

// shareThreshold is the reference's testShareThreshold.
func (r *refTarget) shareThreshold() {
	for range 10 {
		r.ask("share-threshold-test", []string{"files", "files/a.pdf"})
	}
	r.expect("files/b.csv after ten files/a.pdf", r.ask("share-threshold-test", []string{"files", "files/b.csv"}), over, refStatus{over, 10, hour, 0})
	for i := range 10 {
		v := fmt.Sprintf("files_no_share/%s-%d", unique(), i)
		r.expect("files_no_share "+v, r.ask("share-threshold-test", []string{"files_no_share", v}), ok, refStatus{ok, 10, hour, 9})
	}
}

// reload is the reference's testConfigReload: a file added to the config
// directory is served, and one removed is dropped. Its file has no
// "_local" keys: the reference runs it without a local cache.
func (r *refTarget) reload() {
	r.expect("reload domain before", r.ask("reload", []string{"block", "foo"}), ok, refStatus{code: ok})
	data, err := os.ReadFile(filepath.Join(r.root, "ratelimit", "reload.yaml"))
	if err != nil {
		r.t.Fatal(err)
	}
	added := filepath.Join(r.root, "ratelimit", "config", "reload.yaml")
	write(r.t, added, string(data))
	waitFor(r.t, "the reload domain", func() bool {
		return r.ask("reload", []string{"key1", "foo"}).Statuses[0].CurrentLimit != nil
	})
	r.expect("reload key1", r.ask("reload", []string{"key1", "bar"}), ok, refStatus{ok, 50, second, 49})
	r.expect("reload block", r.ask("reload", []string{"block", "foo"}), over, refStatus{over, 0, second, 0})
	if err := os.Remove(added); err != nil {
		r.t.Fatal(err)
	}
	waitFor(r.t, "the reload domain to go", func() bool {
		return r.ask("reload", []string{"key1", "foo"}).Statuses[0].CurrentLimit == nil
	})
}

// all runs the cases, each as a subtest of r.t.
func (r *refTarget) all() {
	parent := r.t
	for _, c := range []struct {
		name string
		run  func()
	}{{"basic", r.basic}, {"share_threshold", r.shareThreshold}, {"reload", r.reload}} {
		parent.Run(c.name, func(t *testing.T) { r.t = t; c.run() })
	}
	r.t = parent
}

// TestReferenceCases runs the reference's integration cases through
// floodgate serve with a configuration that names only the store.
func TestReferenceCases(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			store := storeSection(t, backend)
			if store == "" {
				store = "store:\n  memory: {max_keys: 100000}\n"
			}
			root := refRuntime(t)
			s := startService(t, store, nil, "--envoy-config-dir", filepath.Join(root, "ratelimit", "config"), "--envoy-remove-after", "1s")
			r := newRefTarget(t, s.grpc, s.http, root, false)
			r.all()
		})
	}
}

// refService is floodgate started with the reference's environment only.
type refService struct {
	http, grpc, debug string
	logs              *syncbuf.Buffer // written by the goroutine reading stderr
}

// freeAddr picks a free loopback port.
func freeAddr(t *testing.T) (host, port string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	host, port, _ = net.SplitHostPort(ln.Addr().String())
	return host, port
}

// startReference runs the floodgate binary with args (usually none) and an
// environment of exactly env plus the listeners' host and ports, and
// waits until it listens.
func startReference(t *testing.T, env map[string]string, args ...string) *refService {
	t.Helper()
	return startReferenceProgram(t, env, binary, args...)
}

// startReferenceProgram is startReference running program (floodgate, or
// a link to it) with the argument vector args.
func startReferenceProgram(t *testing.T, env map[string]string, program string, args ...string) *refService {
	t.Helper()
	if _, ok := env["FLOODGATE_ENVOY_REMOVE_AFTER"]; !ok && env["CONFIG_TYPE"] != "GRPC_XDS_SOTW" {
		// The reference's testConfigReload waits for a removed file's
		// domain to go; floodgate keeps it for this long first.
		env["FLOODGATE_ENVOY_REMOVE_AFTER"] = "1s"
	}
	var (
		cmd  *exec.Cmd
		s    *refService
		done chan struct{}
	)
	// A port found free can be taken (by another test's process, or as a
	// connection's local port) before floodgate binds it: then floodgate
	// is started again on other ports.
	for attempt := 1; ; attempt++ {
		for _, name := range []string{"PORT", "GRPC_PORT", "DEBUG_PORT"} {
			var host string
			host, env[name] = freeAddr(t)
			env[strings.TrimSuffix(name, "PORT")+"HOST"] = host
		}
		var list []string
		for k, v := range env {
			if !knownEnvVar(k) {
				t.Fatalf("%s is not a variable of the reference service", k)
			}
			list = append(list, k+"="+v)
		}
		cmd = exec.Command(program, args...)
		cmd.Env = list
		cmd.Dir = t.TempDir()
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		s = &refService{logs: &syncbuf.Buffer{}}
		ready := make(chan struct{})
		done = make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				fmt.Fprintln(s.logs, sc.Text())
				if line := logLine(sc.Text()); line["msg"] == "listening" {
					s.http, s.grpc = "http://"+line["http"], line["grpc"]
					close(ready)
				}
			}
			cmd.Wait()
		}()
		select {
		case <-ready:
		case <-done:
			if attempt < 3 && strings.Contains(s.logs.String(), "address already in use") {
				continue
			}
			t.Fatalf("floodgate exited before listening:\n%s", s.logs.String())
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("floodgate did not start listening")
		}
		break
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	s.debug = "http://" + net.JoinHostPort(env["DEBUG_HOST"], env["DEBUG_PORT"])
	if want := net.JoinHostPort(env["GRPC_HOST"], env["GRPC_PORT"]); s.grpc != want {
		t.Fatalf("gRPC on %s, want %s (GRPC_HOST, GRPC_PORT)", s.grpc, want)
	}
	if want := "http://" + net.JoinHostPort(env["HOST"], env["PORT"]); s.http != want {
		t.Fatalf("HTTP on %s, want %s (HOST, PORT)", s.http, want)
	}
	return s
}

// logLine reads a log line of either format, JSON or text (key=value,
// values quoted when they hold spaces), into its fields.
func logLine(text string) map[string]string {
	out := map[string]string{}
	var js map[string]any
	if json.Unmarshal([]byte(text), &js) == nil {
		for k, v := range js {
			out[k] = fmt.Sprint(v)
		}
		return out
	}
	for text != "" {
		text = strings.TrimLeft(text, " ")
		key, rest, ok := strings.Cut(text, "=")
		if !ok {
			break
		}
		value := rest
		if strings.HasPrefix(rest, `"`) {
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				value, _ = strconv.Unquote(q)
				rest = rest[len(q):]
			}
		} else if i := strings.IndexByte(rest, ' '); i >= 0 {
			value, rest = rest[:i], rest[i:]
		} else {
			rest = ""
		}
		out[key] = value
		text = rest
	}
	return out
}

// referenceEnv is the reference integration test's settings: its runtime
// directory, a Redis over TCP, statsd off.
func referenceEnvFor(root, redisAddr string) map[string]string {
	return map[string]string{
		"RUNTIME_ROOT":         root,
		"RUNTIME_SUBDIRECTORY": "ratelimit",
		"RUNTIME_APPDIRECTORY": "config",
		"REDIS_SOCKET_TYPE":    "tcp",
		"REDIS_URL":            redisAddr,
		"USE_STATSD":           "false",
		"LOG_FORMAT":           "json",
		// A loaded test machine can take longer than floodgate's usual
		// store deadline; the reference's own timeout is 10s.
		"REDIS_TIMEOUT": "2s",
	}
}

// TestReferenceEnvironment starts floodgate with nothing but the
// reference's environment, against a real Redis, in the variants of the
// reference's TestBasicConfig, and runs its cases.
func TestReferenceEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]string
		local bool
		pass  string
	}{
		{name: "plain"},
		{name: "local cache", extra: map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1000"}, local: true},
		{name: "cache key prefix", extra: map[string]string{"CACHE_KEY_PREFIX": "prefix:"}},
		{name: "stop increment when over limit", extra: map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}},
		{name: "per-second Redis, ignored", extra: map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "127.0.0.1:1"}},
		{name: "auth", pass: "password123", extra: map[string]string{"REDIS_AUTH": "password123"}},
		{name: "auth with a user", pass: "password123", extra: map[string]string{"REDIS_AUTH": "default:password123"}},
		{name: "without watching the root", extra: map[string]string{"RUNTIME_WATCH_ROOT": "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var srv *redistest.Server
			if tc.pass != "" {
				srv = redistest.Start(t, "--requirepass", tc.pass)
			} else {
				srv = redistest.Start(t)
			}
			root := refRuntime(t)
			env := referenceEnvFor(root, srv.Addr)
			for k, v := range tc.extra {
				env[k] = v
			}
			s := startReference(t, env)
			r := newRefTarget(t, s.grpc, s.http, root, tc.local)
			r.all()
			if tc.extra["CACHE_KEY_PREFIX"] != "" {
				if keys := srv.MustDo("KEYS", "prefix:*"); keys == "" {
					t.Errorf("no Redis key starts with CACHE_KEY_PREFIX")
				}
			}
			if tc.extra["REDIS_PERSECOND"] != "" && !strings.Contains(s.logs.String(), `"var":"REDIS_PERSECOND"`) {
				t.Errorf("REDIS_PERSECOND ignored without a word:\n%s", s.logs.String())
			}
		})
	}
}

// The reference's endpoints answer on its ports.
func TestReferenceEndpointsE2E(t *testing.T) {
	srv := redistest.Start(t)
	root := refRuntime(t)
	env := referenceEnvFor(root, srv.Addr)
	env["LIMIT_RESPONSE_HEADERS_ENABLED"] = "true"
	env["LIMIT_REMAINING_HEADER"] = "X-Left"
	env["USE_PROMETHEUS"] = "true"
	promHost, promPort := freeAddr(t)
	env["PROMETHEUS_ADDR"] = net.JoinHostPort(promHost, promPort)
	env["PROMETHEUS_PATH"] = "/prom"
	// The command of the reference's docker-compose example, given to
	// floodgate's entrypoint.
	s := startReference(t, env, "/bin/ratelimit")
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(s.http + "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
	if code, body := get(s.debug + "/rlconfig"); code != 200 || !strings.Contains(body, "basic.key1: unit=SECOND requests_per_unit=50, shadow_mode: false, quota_mode: false\n") {
		t.Errorf("/rlconfig: %d\n%s", code, body)
	}
	if code, body := get("http://" + env["PROMETHEUS_ADDR"] + "/prom"); code != 200 || !strings.Contains(body, "floodgate_") {
		t.Errorf("PROMETHEUS_ADDR/PROMETHEUS_PATH: %d\n%.300s", code, body)
	}
	body := `{"domain": "basic", "descriptors": [{"entries": [{"key": "one_per_minute", "value": "x"}]}]}`
	for i, want := range []int{200, 429} {
		resp, err := http.Post(s.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || !strings.Contains(string(b), `"requestsPerUnit":1`) || !strings.Contains(string(b), `"key":"X-Left"`) {
			t.Errorf("POST /json %d: %d %s", i, resp.StatusCode, b)
		}
	}
	r := newRefTarget(t, s.grpc, s.http, root, false)
	h, err := healthpb.NewHealthClient(r.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of \"ratelimit\": %v %v", h, err)
	}
	resp := r.ask("basic", []string{"key1", "hdr"})
	got := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		got[hv.Key] = hv.Value
	}
	if got["RateLimit-Limit"] != "50" || got["X-Left"] != "49" || got["RateLimit-Reset"] != "1" {
		t.Errorf("quota headers = %v", got)
	}
}

// A setting floodgate cannot honour stops the start with a reason; without
// the reference's environment, no arguments is still a usage error.
func TestReferenceEnvironmentRefused(t *testing.T) {
	out, err := exec.Command(binary, "ratelimit", "--help").CombinedOutput()
	if exitCode(err) != 0 || !strings.HasPrefix(string(out), "Usage: floodgate ratelimit") {
		t.Errorf("ratelimit --help: %v\n%s", err, out)
	}
	bare := exec.Command(binary)
	bare.Env = []string{"HOST=laptop", "PORT=3000"}
	if out, err := bare.CombinedOutput(); exitCode(err) != exitUsage || !strings.Contains(string(out), "Usage:") {
		t.Errorf("no arguments, no reference environment: %v\n%s", err, out)
	}
	for _, kv := range [][2]string{{"BACKEND_TYPE", "memcache"}, {"CONFIG_TYPE", "GRPC_XDS_DELTA"}, {"GRPC_UDS", "/tmp/rl.sock"}, {"REDIS_TYPE", "RING"}} {
		// Bare, and as the image's entrypoint (floodgate serve, no flags):
		// both run as the reference, which refuses the setting.
		for _, argv := range [][]string{nil, {"serve"}} {
			cmd := exec.Command(binary, argv...)
			cmd.Env = []string{"REDIS_URL=127.0.0.1:1", "REDIS_SOCKET_TYPE=tcp", kv[0] + "=" + kv[1]}
			out, err := cmd.CombinedOutput()
			if exitCode(err) != exitUsage || !strings.Contains(string(out), kv[0]+"=") {
				t.Errorf("floodgate %v with %s=%s: exit %v\n%s", argv, kv[0], kv[1], err, out)
			}
		}
	}
}

// Every variable the docs list is one knownEnvVar knows, and the other way
// round.
func TestReferenceEnvDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "envoy.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range referenceEnv {
		if !strings.Contains(string(doc), "| `"+v.name+"` |") {
			t.Errorf("docs/envoy.md has no row for %s", v.name)
		}
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			if name, _, ok = strings.Cut(name, "` |"); ok && strings.ToUpper(name) == name && !knownEnvVar(name) {
				t.Errorf("docs/envoy.md lists %s, which knownEnvVar does not know", name)
			}
		}
	}
	if knownEnvVar("REDIS_URLS") || !knownEnvVar("GOMAXPROCS") {
		t.Error("knownEnvVar is wrong about REDIS_URLS or GOMAXPROCS")
	}
}

// RUNTIME_WATCH_ROOT: a deployment that swaps the runtime root, a
// symbolic link, to a new version is reloaded.
func TestReferenceRuntimeRootSwap(t *testing.T) {
	srv := redistest.Start(t)
	base := t.TempDir()
	for _, v := range []struct{ dir, limit string }{{"v1", "5"}, {"v2", "7"}} {
		dir := filepath.Join(base, v.dir, "ratelimit", "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, "swap.yaml"), "domain: swap\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: "+v.limit+"}\n")
	}
	root := filepath.Join(base, "current")
	if err := os.Symlink(filepath.Join(base, "v1"), root); err != nil {
		t.Fatal(err)
	}
	env := referenceEnvFor(root, srv.Addr)
	s := startReference(t, env)
	r := newRefTarget(t, s.grpc, s.http, root, false)
	limit := func() uint32 { return r.ask("swap", []string{"k", "v"}).Statuses[0].CurrentLimit.GetRequestsPerUnit() }
	if got := limit(); got != 5 {
		t.Fatalf("limit %d before the swap, want 5", got)
	}
	// Swap the link atomically, as deployments do.
	tmp := filepath.Join(base, "next")
	if err := os.Symlink(filepath.Join(base, "v2"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the swapped root's limit", func() bool { return limit() == 7 })
}

// A configuration that names only the store is valid with Envoy domains,
// for floodgate validate as for serve (TestReferenceCases).
func TestValidateStoreOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	write(t, path, "store:\n  memory: {max_keys: 1000}\n")
	envoyDir := filepath.Join(refRuntime(t), "ratelimit", "config")
	out, err := exec.Command(binary, "validate", "--envoy-config-dir", envoyDir, path).CombinedOutput()
	if exitCode(err) != 0 || !strings.Contains(string(out), path+": ok (0 limiters, memory store)") {
		t.Errorf("validate a store-only config with Envoy domains: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "validate", path).CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "limiters: must hold at least one limiter") {
		t.Errorf("validate a store-only config alone: %v\n%s", err, out)
	}
}

// REDIS_TLS and REDIS_TLS_CACERT: Redis over TLS, and
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION for a certificate whose name is
// not the one dialled.
func TestReferenceRedisTLS(t *testing.T) {
	certFile, keyFile, _ := testcert.SelfSigned(t, t.TempDir()) // for 127.0.0.1
	_, tlsPort := freeAddr(t)
	srv := redistest.Start(t, "--tls-port", tlsPort, "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")
	for _, tc := range []struct{ host, skip string }{{"127.0.0.1", "false"}, {"localhost", "true"}} {
		t.Run(tc.host, func(t *testing.T) {
			root := refRuntime(t)
			env := referenceEnvFor(root, net.JoinHostPort(tc.host, tlsPort))
			env["REDIS_TLS"], env["REDIS_TLS_CACERT"], env["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"] = "true", certFile, tc.skip
			s := startReference(t, env)
			r := newRefTarget(t, s.grpc, s.http, root, false)
			r.expect("over TLS", r.ask("basic", []string{"key1", tc.host}), ok, refStatus{ok, 50, second, 49})
		})
	}
	if n := srv.MustDo("DBSIZE"); n == "0" {
		t.Error("nothing was written to the Redis behind TLS")
	}
}

// REDIS_TYPE=CLUSTER and REDIS_TYPE=SENTINEL, as the reference's
// TestBasicAuthConfigWithRedisCluster and ...WithRedisSentinel run them.
func TestReferenceRedisTopologies(t *testing.T) {
	t.Parallel()
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		root := refRuntime(t)
		env := referenceEnvFor(root, strings.Join(c.Addrs(), ","))
		env["REDIS_TYPE"] = "CLUSTER"
		s := startReference(t, env)
		newRefTarget(t, s.grpc, s.http, root, false).all()
		if strings.Contains(s.logs.String(), "not a Cluster") {
			t.Errorf("a real Cluster taken for a single node:\n%s", s.logs.String())
		}
	})
	// Seed nodes that are not a Cluster: served as a single node, with a
	// warning that says what to set.
	t.Run("cluster on a single node", func(t *testing.T) {
		srv := redistest.Start(t)
		root := refRuntime(t)
		env := referenceEnvFor(root, srv.Addr)
		env["REDIS_TYPE"] = "CLUSTER"
		s := startReference(t, env)
		r := newRefTarget(t, s.grpc, s.http, root, false)
		r.expect("cluster on a single node", r.ask("basic", []string{"key1", "single"}), ok, refStatus{ok, 50, second, 49})
		if !strings.Contains(s.logs.String(), "set REDIS_TYPE=SINGLE") {
			t.Errorf("REDIS_TYPE=CLUSTER on a single Redis accepted without a word:\n%s", s.logs.String())
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		master := redistest.Start(t)
		sentinel := redistest.StartSentinel(t, master)
		root := refRuntime(t)
		env := referenceEnvFor(root, "mymaster,"+sentinel.Addr)
		env["REDIS_TYPE"] = "SENTINEL"
		s := startReference(t, env)
		newRefTarget(t, s.grpc, s.http, root, false).all()
		if n := master.MustDo("DBSIZE"); n == "0" {
			t.Error("nothing was written to the master the sentinel names")
		}
	})
}
