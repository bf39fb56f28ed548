package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/server"
)

// binary is the floodgate program built once for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "floodgate-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "floodgate")
	if err := buildFloodgate(binary, ""); err != nil {
		fmt.Fprintln(os.Stderr, "building floodgate:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildFloodgate compiles this command into the file out, passing ldflags
// (if any) to the linker. It builds as the Containerfile does (cgo off,
// -trimpath), so the tests' builds and the image's (TestImage) share Go's
// build cache: the packages are compiled once, and every later build only
// links.
func buildFloodgate(out, ldflags string) error {
	args := []string{"build", "-trimpath", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, msg)
	}
	return nil
}

// service is a running floodgate serve process.
type service struct {
	t      *testing.T
	cmd    *exec.Cmd
	http   string // base URL
	grpc   string // host:port
	config string // the config file's path
	done   chan struct{}
	err    error // Wait's result, after done

	mu   sync.Mutex
	logs []map[string]any
}

// startService runs floodgate serve with yaml as its config file on
// loopback ports and waits for its listening line.
func startService(t *testing.T, yaml string, env []string, args ...string) *service {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"serve", "--config", path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
		"--log-format", "json", "--shutdown-timeout", "5s"}, args...)
	return startArgs(t, dir, env, path, argv...)
}

func startArgs(t *testing.T, dir string, env []string, path string, argv ...string) *service {
	t.Helper()
	cmd := exec.Command(binary, argv...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &service{t: t, cmd: cmd, config: path, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				line = map[string]any{"msg": sc.Text()}
			}
			s.mu.Lock()
			s.logs = append(s.logs, line)
			s.mu.Unlock()
			if line["msg"] == "listening" {
				s.http = "http://" + line["http"].(string)
				s.grpc, _ = line["grpc"].(string)
				close(ready)
			}
		}
		s.err = cmd.Wait()
		close(s.done)
	}()
	select {
	case <-ready:
	case <-s.done:
		t.Fatalf("floodgate exited before listening: %v\n%s", s.err, s.logText())
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("floodgate did not start listening:\n%s", s.logText())
	}
	t.Cleanup(func() {
		select {
		case <-s.done:
			return
		default:
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

func (s *service) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, l := range s.logs {
		j, _ := json.Marshal(l)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// logged reports whether a log line has message msg.
func (s *service) logged(msg string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.logs {
		if l["msg"] == msg {
			return true
		}
	}
	return false
}

// stop sends SIGTERM and waits for the process to exit.
func (s *service) stop() error {
	s.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.t.Fatal("floodgate did not stop within 10s of SIGTERM")
	}
	return s.err
}

// call sends a request and returns the status and body.
func (s *service) call(method, path, body string, header ...string) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.http+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// decision is the API's decision shape.
type decision struct {
	Allowed      bool   `json:"allowed"`
	Reason       string `json:"reason"`
	Rule         string `json:"rule"`
	Limit        int64  `json:"limit"`
	Capacity     int64  `json:"capacity"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Never        bool   `json:"never"`
	Ticket       string `json:"ticket"`
	// LapsesAfterMS is a reservation's.
	LapsesAfterMS int64 `json:"lapses_after_ms"`
	Rules         []struct {
		Name         string `json:"name"`
		Allowed      bool   `json:"allowed"`
		Shadow       bool   `json:"shadow"`
		Limit        int64  `json:"limit"`
		Capacity     int64  `json:"capacity"`
		Remaining    int64  `json:"remaining"`
		ResetAfterMS int64  `json:"reset_after_ms"`
		RetryAfterMS int64  `json:"retry_after_ms"`
		Never        bool   `json:"never"`
	} `json:"rules"`
}

func (s *service) decide(path, body string) decision {
	s.t.Helper()
	code, b := s.call("POST", path, body)
	if code != 200 {
		s.t.Fatalf("POST %s %s: %d %s", path, body, code, b)
	}
	var d decision
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		s.t.Fatalf("decision %s: %v", b, err)
	}
	return d
}

const e2eConfig = `
limiters:
  - name: api
    rules:
      - {name: per-user, key: [user], algorithm: fixed_window, limit: 100, window: 1m}
      - {name: per-org, key: [org], algorithm: token_bucket, limit: 1, window: 1h, burst: 150}
  - name: leases
    rules:
      - {name: per-user, key: [user], algorithm: concurrency, limit: 2, window: 1m}
`

// storeSection returns the store section for a backend: "" for the memory
// store (the default), or a redis section pointing at a fresh redis-server.
// The Redis deadline is 2s, not the 50ms default: these tests check what the
// service answers, and under -race on a busy machine a store call can take
// longer than 50ms, which would make the answer the failure policy's.
func storeSection(t *testing.T, backend string) string {
	t.Helper()
	if backend == "memory" {
		return ""
	}
	srv := redistest.Start(t)
	return "store:\n  redis: {url: \"redis://" + srv.Addr + "/0\", deadline: 2s}\n"
}

// forEachStore runs fn against the memory store and against a real Redis.
func forEachStore(t *testing.T, fn func(t *testing.T, store string)) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) { fn(t, storeSection(t, backend)) })
	}
}

// TestAdmissionUnderConcurrency: concurrent clients over HTTP get exactly
// the limit admitted, per rule, and all-or-nothing across rules.
func TestAdmissionUnderConcurrency(t *testing.T) {
	forEachStore(t, testAdmissionUnderConcurrency)
}

func testAdmissionUnderConcurrency(t *testing.T, store string) {
	s := startService(t, store+e2eConfig, nil)
	count := func(body string, clients, each int) int {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			allowed int
		)
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					resp, err := http.Post(s.http+"/v1/check", "application/json", strings.NewReader(body))
					if err != nil {
						t.Error(err)
						return
					}
					var d decision
					err = json.NewDecoder(resp.Body).Decode(&d)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 {
						t.Errorf("status %d: %v", resp.StatusCode, err)
						return
					}
					if d.Allowed {
						mu.Lock()
						allowed++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		return allowed
	}
	if got := count(`{"limiter":"api","attributes":{"user":"u1"}}`, 16, 20); got != 100 {
		t.Errorf("per-user fixed window admitted %d of 320, want exactly 100", got)
	}
	// Two users of one org: the org's bucket (150) binds before the users'
	// windows (100 each), and the users' windows count only admitted
	// requests.
	var wg sync.WaitGroup
	var a, b int
	wg.Add(2)
	go func() { defer wg.Done(); a = count(`{"limiter":"api","attributes":{"user":"u2","org":"o"}}`, 8, 20) }()
	go func() { defer wg.Done(); b = count(`{"limiter":"api","attributes":{"user":"u3","org":"o"}}`, 8, 20) }()
	wg.Wait()
	if a+b != 150 || a > 100 || b > 100 {
		t.Errorf("org bucket admitted %d + %d, want 150 in all, at most 100 each", a, b)
	}
	d := s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u2"},"cost":0}`)
	if d.Remaining != int64(100-a) {
		t.Errorf("u2 has %d left, want %d: a request denied by the org charged the user", d.Remaining, 100-a)
	}
}

func TestAPIShapes(t *testing.T) { forEachStore(t, testAPIShapes) }

func testAPIShapes(t *testing.T, store string) {
	s := startService(t, store+e2eConfig, []string{"FLOODGATE_TICKET_SECRET=e2e"})
	d := s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u1","org":"o1"},"cost":1}`)
	if !d.Allowed || d.Reason != "" || d.Rule != "per-user" || d.Limit != 100 || d.Remaining != 99 ||
		d.ResetAfterMS != 60000 || d.RetryAfterMS != 0 || d.Ticket == "" || len(d.Rules) != 2 {
		t.Errorf("check: %+v", d)
	}
	if r := d.Rules[1]; r.Name != "per-org" || !r.Allowed || r.Limit != 1 || r.Capacity != 150 || r.Remaining != 149 || r.ResetAfterMS != 3600000 {
		t.Errorf("per-org rule: %+v", r)
	}
	// Refund puts the unit back in both rules.
	if code, b := s.call("POST", "/v1/refund", `{"ticket":"`+d.Ticket+`"}`); code != 204 || len(b) != 0 {
		t.Errorf("refund: %d %s", code, b)
	}
	peek := s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u1","org":"o1"},"cost":0}`)
	if peek.Remaining != 100 || peek.Ticket != "" || !peek.Allowed {
		t.Errorf("peek after refund: %+v", peek)
	}
	rec := s.decide("/v1/record", `{"limiter":"api","attributes":{"user":"u1"},"cost":100}`)
	if rec.Allowed || rec.Remaining != 0 || rec.Ticket != "" {
		t.Errorf("record: %+v", rec)
	}
	denied := s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u1"}}`)
	if denied.Allowed || denied.Reason != "limit" || denied.RetryAfterMS <= 0 || denied.RetryAfterMS > 60000 {
		t.Errorf("denied: %+v", denied)
	}
	never := s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u9"},"cost":101}`)
	if never.Allowed || !never.Never || never.RetryAfterMS != 0 {
		t.Errorf("never: %+v", never)
	}

	code, b := s.call("GET", "/v1/limiters", "")
	if code != 200 || !strings.Contains(string(b), `"name":"leases"`) {
		t.Errorf("limiters: %d %s", code, b)
	}
	if code, b := s.call("GET", "/healthz", ""); code != 200 || !strings.Contains(string(b), "ok") {
		t.Errorf("healthz: %d %s", code, b)
	}
	if code, b := s.call("GET", "/readyz", ""); code != 200 || !strings.Contains(string(b), `"status":"ready"`) {
		t.Errorf("readyz: %d %s", code, b)
	}
	code, b = s.call("GET", "/metrics", "")
	for _, want := range []string{
		`floodgate_decisions_total{limiter="api",result="allowed",rule="per-user"} 2`,
		`floodgate_decisions_total{limiter="api",result="denied",rule="per-user"} 2`,
		`floodgate_refunds_total{limiter="api",result="applied"} 1`,
		`floodgate_config_reloads_total{result="success"} 1`,
		`floodgate_breaker_state{limiter="api"} 0`,
		`floodgate_store_duration_seconds_count{error="none",operation="consume"}`,
		`floodgate_http_requests_total{code="204",handler="refund"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code != 200 || strings.Contains(string(b), "u1") {
		t.Errorf("/metrics: %d, or a key in a label", code)
	}
}

// TestTicketsAcrossInstances: instances with the same secret accept each
// other's tickets; an instance with another secret refuses them.
func TestTicketsAcrossInstances(t *testing.T) {
	store := storeSection(t, "redis")
	a := startService(t, store+e2eConfig, []string{"FLOODGATE_TICKET_SECRET=shared"})
	b := startService(t, store+e2eConfig, []string{"FLOODGATE_TICKET_SECRET=shared"})
	c := startService(t, store+e2eConfig, nil)
	d := a.decide("/v1/check", `{"limiter":"leases","attributes":{"user":"u1"}}`)
	if d2 := b.decide("/v1/check", `{"limiter":"leases","attributes":{"user":"u1"}}`); !d2.Allowed {
		t.Fatalf("second lease of 2 denied on the other instance")
	}
	if d3 := c.decide("/v1/check", `{"limiter":"leases","attributes":{"user":"u1"}}`); d3.Allowed {
		t.Fatalf("third lease of 2 admitted on a third instance: the instances do not share Redis")
	}
	if code, body := b.call("POST", "/v1/refund", `{"ticket":"`+d.Ticket+`"}`); code != 204 {
		t.Errorf("refund on a same-secret instance: %d %s", code, body)
	}
	if d4 := c.decide("/v1/check", `{"limiter":"leases","attributes":{"user":"u1"}}`); !d4.Allowed {
		t.Errorf("the lease refunded on another instance was not released")
	}
	if code, body := c.call("POST", "/v1/refund", `{"ticket":"`+d.Ticket+`"}`); code != 400 || !strings.Contains(string(body), "invalid-ticket") {
		t.Errorf("refund on another-secret instance: %d %s", code, body)
	}
}

// TestTwoInstancesShareRedis: concurrent clients of two instances sharing
// one Redis are admitted exactly the limit together.
func TestTwoInstancesShareRedis(t *testing.T) {
	store := storeSection(t, "redis")
	a := startService(t, store+e2eConfig, nil)
	b := startService(t, store+e2eConfig, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for i := 0; i < 16; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				resp, err := http.Post(s.http+"/v1/check", "application/json", strings.NewReader(`{"limiter":"api","attributes":{"user":"shared"}}`))
				if err != nil {
					t.Error(err)
					return
				}
				var d decision
				json.NewDecoder(resp.Body).Decode(&d)
				resp.Body.Close()
				if d.Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if allowed != 100 {
		t.Errorf("two instances admitted %d of 320, want exactly 100", allowed)
	}
}

func TestErrorStatuses(t *testing.T) {
	s := startService(t, e2eConfig, []string{"FLOODGATE_ADMIN_TOKEN=tok"})
	big := `{"limiter":"api","attributes":{"user":"` + strings.Repeat("x", 70<<10) + `"}}`
	for _, tt := range []struct {
		method, path, body string
		header             []string
		status             int
	}{
		{"POST", "/v1/check", `{"limiter":"api","bogus":1}`, nil, 400},
		{"POST", "/v1/check", `{"limiter":"api","cost":-2}`, nil, 400},
		{"POST", "/v1/check", `not json`, nil, 400},
		{"POST", "/v1/check", `{"limiter":"ghost"}`, nil, 404},
		{"POST", "/v1/record", `{"limiter":"ghost"}`, nil, 404},
		{"POST", "/v1/record", `{"limiter":"api","usage":{"input":1}}`, nil, 400},
		{"POST", "/v1/select", `{"route":"ghost"}`, nil, 404},
		{"POST", "/v1/select", `{"candidates":[{"limiter":"ghost"}]}`, nil, 404},
		{"POST", "/v1/select", `{}`, nil, 400},
		{"POST", "/v1/select", `{"candidates":[{"limiter":"api"}],"bogus":1}`, nil, 400},
		{"GET", "/v1/select", ``, nil, 405},
		{"POST", "/v1/check", big, nil, 413},
		{"PUT", "/v1/check", `{}`, nil, 405},
		{"DELETE", "/v1/limiters", ``, nil, 405},
		{"POST", "/v1/refund", `{"ticket":"forged"}`, nil, 400},
		{"GET", "/nowhere", ``, nil, 404},
		{"POST", "/v1/reset", `{"limiter":"api","attributes":{"user":"u1"}}`, nil, 401},
		{"POST", "/v1/reset", `{"limiter":"api","attributes":{"user":"u1"}}`, []string{"Authorization", "Bearer wrong"}, 401},
		{"POST", "/v1/reset", `{"limiter":"api","attributes":{"user":"u1"}}`, []string{"Authorization", "Bearer tok"}, 204},
	} {
		code, b := s.call(tt.method, tt.path, tt.body, tt.header...)
		if code != tt.status {
			t.Errorf("%s %s %.40s: %d %s, want %d", tt.method, tt.path, tt.body, code, b, tt.status)
			continue
		}
		if code >= 400 {
			var p struct {
				Type, Title, Detail string
				Status              int
			}
			if err := json.Unmarshal(b, &p); err != nil || p.Status != code || p.Detail == "" || !strings.HasPrefix(p.Type, "urn:floodgate:problem:") {
				t.Errorf("%s %s: problem %s", tt.method, tt.path, b)
			}
		}
	}
	// Without a token the admin endpoints are off.
	off := startService(t, e2eConfig, nil)
	if code, _ := off.call("POST", "/v1/reset", `{"limiter":"api"}`, "Authorization", "Bearer tok"); code != 403 {
		t.Errorf("reset with admin disabled: %d, want 403", code)
	}
}

func TestHotReload(t *testing.T) { forEachStore(t, testHotReload) }

func testHotReload(t *testing.T, store string) {
	s := startService(t, store+limitYAML(5), nil)
	limit := func() int64 {
		return s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"peek"},"cost":0}`).Limit
	}
	// A good change is applied by the file watcher.
	write(t, s.config, store+limitYAML(6))
	waitFor(t, "the watcher to apply limit 6", func() bool { return limit() == 6 })

	// A broken change is rejected; the old config keeps serving.
	write(t, s.config, store+"limiters:\n  - name: api\n    rules: [{name: r, algorithm: gcra, limit: 0, window: 1s}]\n")
	waitFor(t, "the broken file to be reported", func() bool {
		_, b := s.call("GET", "/readyz", "")
		return strings.Contains(string(b), "last_reload_error")
	})
	if got := limit(); got != 6 {
		t.Errorf("limit after a broken change = %d, want 6", got)
	}
	_, b := s.call("GET", "/readyz", "")
	if !strings.Contains(string(b), "limiters[0].rules[0].limit: must be at least 1, got 0") {
		t.Errorf("readyz does not say what is wrong: %s", b)
	}
	if _, m := s.call("GET", "/metrics", ""); !strings.Contains(string(m), `floodgate_config_reloads_total{result="failure"} 1`) {
		t.Errorf("the failed reload is not counted")
	}
	if !s.logged("config reload failed; the previous configuration keeps serving") {
		t.Errorf("the failed reload is not logged")
	}
}

// TestSIGHUP reloads on the signal with the watcher off.
func TestSIGHUP(t *testing.T) {
	s := startService(t, limitYAML(5), nil, "--watch=false")
	write(t, s.config, limitYAML(8))
	time.Sleep(300 * time.Millisecond)
	if d := s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"x"},"cost":0}`); d.Limit != 5 {
		t.Fatalf("reloaded without a signal (watch off): limit %d", d.Limit)
	}
	s.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "SIGHUP to reload", func() bool {
		return s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"x"},"cost":0}`).Limit == 8
	})
}

// TestGracefulShutdown: on SIGTERM a request in flight finishes, new
// connections are refused, and the process exits 0.
func TestGracefulShutdown(t *testing.T) {
	s := startService(t, e2eConfig, nil)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", s.http+"/v1/check", pr)
	type result struct {
		code int
		body []byte
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{code: resp.StatusCode, body: b}
	}()
	io.WriteString(pw, `{"limiter":"api",`) // the request is now in flight
	time.Sleep(200 * time.Millisecond)
	s.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the shutdown to begin", func() bool { return s.logged("shutting down") })
	time.Sleep(100 * time.Millisecond)
	if _, err := http.Post(s.http+"/healthz", "", nil); err == nil {
		t.Error("a new connection was accepted during shutdown")
	}
	io.WriteString(pw, `"attributes":{"user":"u1"}}`)
	pw.Close()
	r := <-res
	if r.err != nil || r.code != 200 || !strings.Contains(string(r.body), `"allowed":true`) {
		t.Errorf("in-flight request: %d %s %v", r.code, r.body, r.err)
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	if s.err != nil {
		t.Errorf("exit: %v, want status 0", s.err)
	}
	if !s.logged("stopped") {
		t.Errorf("no stopped line:\n%s", s.logText())
	}
}

// TestDefaultConfig: serve with no --config in a directory without
// floodgate.yaml serves the built-in sample.
func TestDefaultConfig(t *testing.T) {
	dir := t.TempDir()
	s := startArgs(t, dir, nil, "", "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log-format", "json")
	d := s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u1","org":"acme","plan":"pro"}}`)
	if !d.Allowed || d.Limit != 20 {
		t.Errorf("sample config decision: %+v", d)
	}
	if !s.logged("no --config and no ./floodgate.yaml: serving the built-in sample configuration") {
		t.Error("the fallback to the sample is not logged")
	}
	// Without a token, the start-up line names every admin endpoint.
	off := "no admin token set: admin endpoints (POST /v1/reset, GET /v1/top, GET /status/) are disabled; set --admin-token or FLOODGATE_ADMIN_TOKEN"
	if got := strings.Join((&server.Server{}).AdminEndpoints(), ", "); !strings.Contains(off, "("+got+")") {
		t.Errorf("the server's admin endpoints are %s; the test expects the line %q", got, off)
	}
	if !s.logged(off) {
		t.Errorf("no line %q:\n%s", off, s.logText())
	}
	if err := s.stop(); err != nil {
		t.Errorf("exit: %v", err)
	}
}

func TestStartupErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	write(t, bad, "limiters:\n  - name: api\n    rules:\n      - {name: r, algorithm: gcra, limit: 1, window: 1s, burst: -1}\n")
	out, err := exec.Command(binary, "serve", "--config", bad, "--http", "127.0.0.1:0", "--grpc", "-").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), bad+":4:65: limiters[0].rules[0].burst: must not be negative, got -1") {
		t.Errorf("serve with a bad config: exit %d\n%s", code, out)
	}
	redis := filepath.Join(dir, "redis.yaml")
	write(t, redis, "store:\n  redis: {url: \"redis://127.0.0.1:1\"}\nlimiters:\n  - name: api\n    rules: [{name: r, algorithm: gcra, limit: 1, window: 1s}]\n")
	out, err = exec.Command(binary, "serve", "--config", redis, "--http", "127.0.0.1:0", "--grpc", "-").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "store.redis") {
		t.Errorf("serve with an unusable redis: exit %d\n%s", code, out)
	}
	out, err = exec.Command(binary, "serve", "--bogus").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "flag provided but not defined: -bogus") {
		t.Errorf("serve --bogus: exit %d\n%s", code, out)
	}
}

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	write(t, good, e2eConfig)
	write(t, bad, "limiters:\n  - name: api\n    rules:\n      - name: r\n        algorithm: gcra\n        limit: 1\n        window: 1s\n        windw: 2s\n  - name: api\n    rules: [{name: r, algorithm: magic, limit: 1, window: 1s}]\n")
	var stdout, stderr bytes.Buffer
	m := &Main{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	if code := m.Run(context.Background(), []string{"validate", good}); code != 0 {
		t.Errorf("validate good: exit %d: %s", code, stderr.String())
	}
	if got, want := stdout.String(), good+": ok (2 limiters, memory store)\n"; got != want {
		t.Errorf("validate good printed %q, want %q", got, want)
	}
	stdout.Reset()
	out, err := exec.Command(binary, "validate", good, bad).CombinedOutput()
	want := good + ": ok (2 limiters, memory store)\n" +
		bad + ":8:9: limiters[0].rules[0].windw: unknown field (did you mean window?)\n" +
		bad + ":9:11: limiters[1].name: duplicate limiter name \"api\" (first defined at line 2)\n" +
		bad + ":10:34: limiters[1].rules[0].algorithm: unknown algorithm \"magic\" (want one of fixed_window, sliding_window, token_bucket, gcra, concurrency)\n"
	if code := exitCode(err); code != 1 || string(out) != want {
		t.Errorf("validate good bad: exit %d\n%s\nwant exit 1\n%s", code, out, want)
	}
	// With no file, validate checks what serve would start with:
	// ./floodgate.yaml, else the built-in sample.
	validateHere := func() (string, int) {
		cmd := exec.Command(binary, "validate")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	if out, code := validateHere(); code != 0 || out != "built-in sample floodgate.yaml: ok (6 limiters, memory store); there is no ./floodgate.yaml, so floodgate serve starts with it\n" {
		t.Errorf("validate with no file and no ./floodgate.yaml: exit %d\n%s", code, out)
	}
	write(t, filepath.Join(dir, "floodgate.yaml"), e2eConfig)
	if out, code := validateHere(); code != 0 || out != "floodgate.yaml: ok (2 limiters, memory store)\n" {
		t.Errorf("validate with no file and a good ./floodgate.yaml: exit %d\n%s", code, out)
	}
	write(t, filepath.Join(dir, "floodgate.yaml"), e2eConfig+"bogus: 1\n")
	if out, code := validateHere(); code != 1 || !strings.Contains(out, "floodgate.yaml:") || !strings.Contains(out, ": bogus: unknown field") {
		t.Errorf("validate with no file and a bad ./floodgate.yaml: exit %d\n%s\nwant exit 1 and floodgate.yaml:…: bogus: unknown field", code, out)
	}
	out, err = exec.Command(binary, "validate", filepath.Join(dir, "absent.yaml")).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "no such file") {
		t.Errorf("validate absent: exit %d\n%s", code, out)
	}
	if root := filepath.Join("..", "..", "floodgate.yaml"); exitCode(exec.Command(binary, "validate", root).Run()) != 0 {
		t.Error("the sample floodgate.yaml does not validate")
	}
}

func TestCheckCommand(t *testing.T) {
	s := startService(t, `
limiters:
  - name: api
    rules: [{name: per-user, key: [user], algorithm: fixed_window, limit: 1, window: 1m}]
`, nil)
	addr := strings.TrimPrefix(s.http, "http://")
	out, err := exec.Command(binary, "check", "--addr", addr, "--limiter", "api", "--attr", "user=u1").CombinedOutput()
	if code := exitCode(err); code != 0 || !strings.HasPrefix(string(out), "ALLOWED  limiter api\n") || !strings.Contains(string(out), "ticket ") {
		t.Errorf("first check: exit %d\n%s", code, out)
	}
	out, err = exec.Command(binary, "check", "--addr", s.http, "--limiter", "api", "--attr", "user=u1").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.HasPrefix(string(out), "DENIED (limit)  limiter api: retry in ") {
		t.Errorf("second check: exit %d\n%s", code, out)
	}
	out, err = exec.Command(binary, "check", "--addr", addr, "--limiter", "api", "--attr", "user=u2", "--json").CombinedOutput()
	if code := exitCode(err); code != 0 || !strings.HasPrefix(string(out), `{"allowed":true,`) {
		t.Errorf("check --json: exit %d\n%s", code, out)
	}
	out, err = exec.Command(binary, "check", "--addr", addr, "--limiter", "nope").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), `404 Not Found: limiter: no limiter named "nope"`) {
		t.Errorf("check unknown limiter: exit %d\n%s", code, out)
	}
	out, err = exec.Command(binary, "check", "--limiter", "api", "--attr", "novalue").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), `"novalue" is not key=value`) {
		t.Errorf("check bad attr: exit %d\n%s", code, out)
	}
}

func TestHelp(t *testing.T) {
	out, err := exec.Command(binary, "--help").CombinedOutput()
	if exitCode(err) != 0 || !strings.Contains(string(out), "serve      run the decision service") ||
		!strings.Contains(string(out), "ratelimit  act as Envoy's reference rate limit service, configured by its environment variables") {
		t.Errorf("--help: %v\n%s", err, out)
	}
	// Help speaks of what a command does, never of the program's sources.
	if f := regexp.MustCompile(`\w+\.go\b`).FindString(string(out)); f != "" {
		t.Errorf("--help names a source file, %s:\n%s", f, out)
	}
	for _, cmd := range []string{"serve", "validate", "check", "load"} {
		out, err := exec.Command(binary, cmd, "--help").CombinedOutput()
		if exitCode(err) != 0 || !strings.HasPrefix(string(out), "Usage: floodgate "+cmd) {
			t.Errorf("%s --help: %v\n%s", cmd, err, out)
		}
	}
	out, err = exec.Command(binary, "frobnicate").CombinedOutput()
	if exitCode(err) != 2 || !strings.Contains(string(out), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %v\n%s", err, out)
	}
}

func limitYAML(limit int) string {
	return fmt.Sprintf("limiters:\n  - name: api\n    rules: [{name: r, key: [user], algorithm: fixed_window, limit: %d, window: 1m}]\n", limit)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// TestListenAddressesFromEnvironment: with no --http or --grpc, serve
// listens where FLOODGATE_HTTP and FLOODGATE_GRPC say (the image sets them
// to every interface), and a flag still wins over them.
func TestListenAddressesFromEnvironment(t *testing.T) {
	env := []string{"FLOODGATE_HTTP=127.0.0.2:0", "FLOODGATE_GRPC=127.0.0.2:0"}
	svc := startArgs(t, t.TempDir(), env, "", "serve", "--log-format=json")
	if !strings.HasPrefix(svc.http, "http://127.0.0.2:") || !strings.HasPrefix(svc.grpc, "127.0.0.2:") {
		t.Errorf("listening on %s and %s, want 127.0.0.2 from the environment", svc.http, svc.grpc)
	}
	if code, _ := svc.call("GET", "/healthz", ""); code != 200 {
		t.Errorf("GET /healthz: %d", code)
	}
	if err := svc.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	svc = startArgs(t, t.TempDir(), env, "", "serve", "--log-format=json", "--http=127.0.0.1:0")
	if !strings.HasPrefix(svc.http, "http://127.0.0.1:") {
		t.Errorf("--http given: listening on %s, want the flag's 127.0.0.1", svc.http)
	}
	if err := svc.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// TestGrantsAcrossInstances: two instances on one Redis answer a rule with
// grant: true from quota grants, never admitting over its limit, and
// export the grants' counts.
func TestGrantsAcrossInstances(t *testing.T) {
	store := storeSection(t, "redis")
	const cfg = `
limiters:
  - name: hot
    rules:
      - {name: global, algorithm: fixed_window, limit: 1000, window: 1m, grant: true}
`
	a := startService(t, store+cfg, nil)
	b := startService(t, store+cfg, nil)
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for i := range 4 {
		s := []*service{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 400 {
				if s.decide("/v1/check", `{"limiter":"hot"}`).Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// What either instance may hold unspent when the traffic stops is one
	// grant, at most 1/32 of the limit.
	if got := allowed.Load(); got > 1000 || got < 1000-2*1000/32 {
		t.Errorf("two instances admitted %d of 1600 on a limit of 1000 with grants, want 1000 at most and %d at least", got, 1000-2*1000/32)
	}
	code, body := a.call("GET", "/metrics", "")
	if code != 200 || !regexp.MustCompile(`(?m)^floodgate_grants_total [1-9]`).Match(body) {
		t.Errorf("GET /metrics: %d, no grants counted:\n%s", code, grepLines(body, "floodgate_grant"))
	}
}

// grepLines returns the lines of b that contain s.
func grepLines(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
