package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestLoadCommand runs a short load against a service over HTTP: a limit of
// 10 per key over 3 keys admits exactly 30.
func TestLoadCommand(t *testing.T) {
	s := startService(t, `
limiters:
  - name: api
    rules: [{name: per-user, key: [user], algorithm: fixed_window, limit: 10, window: 1h}]
`, nil)
	out, err := exec.Command(binary, "load", "--addr", s.http, "--limiter", "api", "--attribute", "user",
		"--keys", "3", "--concurrency", "4", "--requests", "200", "--duration", "10s", "--quiet", "--json").Output()
	if code := exitCode(err); code != 0 {
		t.Fatalf("load: exit %d: %s", code, out)
	}
	var sum struct {
		Requests, Allowed, Denied, Errors uint64
		Throughput                        float64
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatalf("summary %s: %v", out, err)
	}
	if sum.Requests != 200 || sum.Allowed != 30 || sum.Denied != 170 || sum.Errors != 0 || sum.Throughput <= 0 {
		t.Errorf("summary %+v, want 200 requests, 30 allowed", sum)
	}
	out, err = exec.Command(binary, "load", "--addr", s.http, "--rate", "-1").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "rate must be") {
		t.Errorf("load --rate -1: exit %d\n%s", code, out)
	}
}
