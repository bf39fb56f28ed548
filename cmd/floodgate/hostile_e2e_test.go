package main

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/redistest"
)

// TestPasswordNeverPrinted: a Redis URL that does not parse puts its
// password in none of /readyz, the log and floodgate validate's output.
func TestPasswordNeverPrinted(t *testing.T) {
	const secret = "s3cr3t-pw"
	s := startService(t, limitYAML(5), nil)
	bad := "store:\n  redis: {url: \"redis://:" + secret + "@host:6379x/0\"}\n" + limitYAML(5)
	write(t, s.config, bad)
	s.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "the reload to fail", func() bool { return s.logged("config reload failed; the previous configuration keeps serving") })
	_, readyz := s.call("GET", "/readyz", "")
	if !strings.Contains(string(readyz), "store.redis.url") {
		t.Errorf("/readyz does not report the bad URL: %s", readyz)
	}
	out, _ := exec.Command(binary, "validate", s.config).CombinedOutput()
	if !strings.Contains(string(out), "store.redis.url") {
		t.Errorf("validate does not report the bad URL: %s", out)
	}
	start, _ := exec.Command(binary, "serve", "--config", s.config, "--http", "127.0.0.1:0", "--grpc", "-").CombinedOutput()
	s.stop()
	for what, text := range map[string]string{"/readyz": string(readyz), "the log": s.logText(), "validate": string(out), "serve": string(start)} {
		if strings.Contains(text, secret) {
			t.Errorf("%s shows the password:\n%s", what, text)
		}
	}
}

// TestPasswordNeverPrintedByTheStore: an error from the Redis store, which
// may quote its options, is printed without the password.
func TestPasswordNeverPrintedByTheStore(t *testing.T) {
	const secret = "s3cr3t-pw"
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	write(t, path, "store:\n  redis: {url: \"redis://:"+secret+"@127.0.0.1:1/0\", password: \""+secret+"\"}\n"+limitYAML(5))
	out, _ := exec.Command(binary, "serve", "--config", path, "--http", "127.0.0.1:0", "--grpc", "-").CombinedOutput()
	if !strings.Contains(string(out), "store.redis") || strings.Contains(string(out), secret) {
		t.Errorf("serve with an unreachable Redis:\n%s", out)
	}
}

// holdRequest starts a check whose body never ends, so that it is in
// flight until the connection is cut.
func holdRequest(t *testing.T, s *service) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, _ := http.NewRequest("POST", s.http+"/v1/check", pr)
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	io.WriteString(pw, `{"limiter":"api",`)
	time.Sleep(200 * time.Millisecond)
}

// waitExit waits up to d for the process to exit.
func (s *service) waitExit(d time.Duration) bool {
	select {
	case <-s.done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestSecondSignal: a second SIGTERM during a shutdown that waits for a
// request in flight exits at once, with status 1.
func TestSecondSignal(t *testing.T) {
	s := startService(t, limitYAML(5), nil, "--shutdown-timeout", "60s")
	holdRequest(t, s)
	s.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the shutdown to begin", func() bool { return s.logged("shutting down") })
	if s.waitExit(300 * time.Millisecond) {
		t.Fatal("exited without waiting for the request in flight")
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	if !s.waitExit(5 * time.Second) {
		t.Fatal("a second signal did not make it exit")
	}
	if code := exitCode(s.err); code != 1 {
		t.Errorf("exit status after a second signal: %d, want 1", code)
	}
}

// TestShutdownTimeoutExit: requests cut off by --shutdown-timeout are
// logged, and the exit status is 0, as docs/operations.md says.
func TestShutdownTimeoutExit(t *testing.T) {
	s := startService(t, limitYAML(5), nil, "--shutdown-timeout", "500ms")
	holdRequest(t, s)
	s.cmd.Process.Signal(syscall.SIGTERM)
	if !s.waitExit(5 * time.Second) {
		t.Fatal("no exit after the shutdown timeout")
	}
	if s.err != nil {
		t.Errorf("exit after the shutdown timeout: %v, want status 0", s.err)
	}
	if !s.logged("shutdown timeout: requests still in flight were cut off") {
		t.Errorf("the cut-off requests are not logged:\n%s", s.logText())
	}
}

// TestDrain: with --drain, readiness fails first while the listener still
// answers, and only then the listener closes.
func TestDrain(t *testing.T) {
	s := startService(t, limitYAML(5), nil, "--drain", "1s")
	s.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the shutdown to begin", func() bool { return s.logged("shutting down") })
	resp, err := http.Get(s.http + "/readyz")
	if err != nil {
		t.Fatalf("the listener closed at once: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || !resp.Close {
		t.Errorf("/readyz while draining: %d (Connection: close %v), want 503 and close", resp.StatusCode, resp.Close)
	}
	if code, _ := s.call("POST", "/v1/check", `{"limiter":"api","attributes":{"user":"u"}}`); code != 200 {
		t.Errorf("a check while draining: %d", code)
	}
	if !s.waitExit(5 * time.Second) {
		t.Fatal("no exit after the drain")
	}
	if s.err != nil {
		t.Errorf("exit: %v", s.err)
	}
}

// TestDrainKeepAlive: a keep-alive client that sends throughout a drained
// shutdown gets answers, then refused connections, and never a connection
// cut under it.
func TestDrainKeepAlive(t *testing.T) {
	s := startService(t, limitYAML(1000000), nil, "--drain", "500ms")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	// A connection dialled as the listener closes is reset before it is
	// accepted: one such error, after the last answer, is the listener
	// closing, not a connection cut under a client.
	var answered, refused int
	var lastErr error
	for i := 0; ; i++ {
		if i == 5 {
			s.cmd.Process.Signal(syscall.SIGTERM)
		}
		resp, err := client.Post(s.http+"/v1/check", "application/json", strings.NewReader(`{"limiter":"api","attributes":{"user":"u"}}`))
		switch {
		case err == nil:
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answered++
			if lastErr != nil {
				t.Errorf("an answer after a cut connection: %v", lastErr)
			}
		case strings.Contains(err.Error(), "connection refused"):
			refused++
		case lastErr == nil:
			lastErr = err
		default:
			t.Errorf("request %d: %v, after %v", i, err, lastErr)
		}
		if refused > 0 || i > 2000 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if answered < 10 || refused == 0 {
		t.Errorf("%d answered, %d refused; want answers during the drain, then refusals", answered, refused)
	}
	s.waitExit(5 * time.Second)
}

// TestLoadInterrupted: Ctrl-C ends a load run with its summary and, when
// no request failed, exit status 0.
func TestLoadInterrupted(t *testing.T) {
	s := startService(t, limitYAML(5), nil)
	cmd := exec.Command(binary, "load", "--addr", s.http, "--limiter", "api", "--attribute", "user",
		"--concurrency", "2", "--duration", "1m", "--quiet")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 0 || !strings.Contains(stdout.String(), "requests") {
			t.Errorf("load after Ctrl-C: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("load did not stop on SIGINT")
	}
}

// TestRedisHang: while Redis hangs, /readyz answers well within a
// Kubernetes probe's 1s timeout, ready but degraded (the failure policy
// answers); when it is back, the breaker's closing is logged.
func TestRedisHang(t *testing.T) {
	rs := redistest.Start(t)
	s := startService(t, "store:\n  redis: {url: \"redis://"+rs.Addr+"/0\", deadline: 50ms}\n"+limitYAML(1000), nil)
	check := func() decision {
		return s.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u"}}`)
	}
	if d := check(); d.Reason == "store" {
		t.Fatalf("decided by policy before the hang: %+v", d)
	}
	rs.Pause()
	defer rs.Resume()
	start := time.Now()
	code, body := s.call("GET", "/readyz", "")
	if took := time.Since(start); code != 200 || !strings.Contains(string(body), `"status":"degraded"`) || took > 600*time.Millisecond {
		t.Errorf("/readyz during the hang: %d after %v, want 200 degraded well under 1s: %s", code, took, body)
	}
	waitFor(t, "the breaker to open", func() bool {
		check()
		return s.logged("floodgate: store circuit breaker opened")
	})
	rs.Resume()
	waitFor(t, "decisions by the rules", func() bool { return check().Reason != "store" })
	waitFor(t, "the closing to be logged", func() bool {
		return s.logged("floodgate: store circuit breaker closed: decisions are made by the rules again")
	})
}
