package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
