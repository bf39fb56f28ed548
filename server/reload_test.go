package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/syncbuf"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func limitConfig(limit int) string {
	return fmt.Sprintf(`
limiters:
  - name: api
    rules:
      - {name: per-user, key: [user], algorithm: fixed_window, limit: %d, window: 1m}
`, limit)
}

const brokenConfig = `
limiters:
  - name: api
    rules:
      - {name: per-user, key: [user], algorithm: fixed_window, limit: 5, window: 0s}
`

// limitOf peeks at api's limit for a fresh user.
func (ts *testServer) limitOf() int64 {
	return ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"peek"},"cost":0}`).Limit
}

// eventually polls cond for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, limitConfig(3))
	ts := newTestServer(t, limitConfig(3), nil, func(s *Server) { s.ConfigPath = path })

	// Usage survives a reload that keeps the rule: state is keyed by
	// limiter and rule name.
	ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u1"}}`)
	writeFile(t, path, limitConfig(7))
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if d := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u1"}}`); d.Limit != 7 || d.Remaining != 5 {
		t.Errorf("after reload: limit %d remaining %d, want 7 and 5", d.Limit, d.Remaining)
	}

	writeFile(t, path, brokenConfig)
	err := ts.Reload()
	want := path + ":5:82: limiters[0].rules[0].window: must be at least 1ms, got 0s"
	if err == nil || err.Error() != want {
		t.Fatalf("broken reload: %v, want %s", err, want)
	}
	if got := ts.limitOf(); got != 7 {
		t.Errorf("after a broken reload the limit is %d, want the old 7", got)
	}
	code, _, b := ts.do("GET", "/readyz", "")
	if code != 200 || !strings.Contains(string(b), `"last_reload_error":"`+strings.ReplaceAll(want, `"`, `\"`)) {
		t.Errorf("readyz after a broken reload: %d %s", code, b)
	}
	if got := testutil.ToFloat64(ts.metrics.reloads.WithLabelValues("failure")); got != 1 {
		t.Errorf("failed reloads = %v, want 1", got)
	}
	if got := testutil.ToFloat64(ts.metrics.lastReloadOK); got != 0 {
		t.Errorf("last_reload_successful = %v, want 0", got)
	}

	writeFile(t, path, limitConfig(9))
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, _, b := ts.do("GET", "/readyz", ""); strings.Contains(string(b), "last_reload_error") {
		t.Errorf("a good reload left the error in readyz: %s", b)
	}
}

// TestWatch changes the file the ways editors and Kubernetes do and expects
// each change to be picked up without a signal.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	writeFile(t, path, limitConfig(3))
	ts := newTestServer(t, limitConfig(3), nil, func(s *Server) {
		s.ConfigPath, s.WatchConfig = path, true
	})

	writeFile(t, path, limitConfig(4)) // in place
	eventually(t, "an in-place write", func() bool { return ts.limitOf() == 4 })

	tmp := filepath.Join(dir, ".floodgate.yaml.swp")
	writeFile(t, tmp, limitConfig(5)) // write and rename, as vim and sed -i do
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a rename over the file", func() bool { return ts.limitOf() == 5 })

	writeFile(t, path, brokenConfig)
	eventually(t, "the broken file to be rejected", func() bool {
		return testutil.ToFloat64(ts.metrics.reloads.WithLabelValues("failure")) == 1
	})
	if got := ts.limitOf(); got != 5 {
		t.Errorf("after a broken write the limit is %d, want the old 5", got)
	}
	writeFile(t, path, limitConfig(6))
	eventually(t, "a fix after a broken file", func() bool { return ts.limitOf() == 6 })
}

// TestWatchConfigMap mimics a Kubernetes ConfigMap volume: the file is a
// symlink through "..data", which is swapped atomically to a new directory.
func TestWatchConfigMap(t *testing.T) {
	dir := t.TempDir()
	v1 := filepath.Join(dir, "..2026_01_01_v1")
	os.Mkdir(v1, 0o755)
	writeFile(t, filepath.Join(v1, "floodgate.yaml"), limitConfig(3))
	if err := os.Symlink("..2026_01_01_v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.Symlink("..data/floodgate.yaml", path); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, limitConfig(3), nil, func(s *Server) {
		s.ConfigPath, s.WatchConfig = path, true
	})

	v2 := filepath.Join(dir, "..2026_01_01_v2")
	os.Mkdir(v2, 0o755)
	writeFile(t, filepath.Join(v2, "floodgate.yaml"), limitConfig(8))
	if err := os.Symlink("..2026_01_01_v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(v1)
	eventually(t, "the ConfigMap swap", func() bool { return ts.limitOf() == 8 })
}

const twoLimiters = `
limiters:
  - name: api
    rules:
      - {name: per-user, key: [user], algorithm: fixed_window, limit: 5, window: 1m}
  - name: search
    rules:
      - {name: per-user, key: [user], algorithm: fixed_window, limit: 5, window: 1m}
`

// TestTornWrite writes a two-limiter file in place in two steps, as a slow
// writer does: the first half alone parses, but it is not applied, and the
// second limiter keeps serving its clients.
func TestTornWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, twoLimiters)
	ts := newTestServer(t, twoLimiters, nil, func(s *Server) {
		s.ConfigPath, s.WatchConfig = path, true
	})
	half := strings.Replace(twoLimiters, "limit: 5", "limit: 6", 1)
	half = half[:strings.Index(half, "  - name: search")]
	writeFile(t, path, half)
	eventually(t, "the half file to be rejected", func() bool {
		return testutil.ToFloat64(ts.metrics.reloads.WithLabelValues("failure")) == 1
	})
	if code, _, b := ts.do("POST", "/v1/check", `{"limiter":"search","attributes":{"user":"u"}}`); code != 200 {
		t.Errorf("search after the half write: %d %s", code, b)
	}
	if got := ts.limitOf(); got != 5 {
		t.Errorf("api's limit after the half write is %d, want the old 5", got)
	}
	_, _, b := ts.do("GET", "/readyz", "")
	if !strings.Contains(string(b), `no longer defines limiter \"search\"`) {
		t.Errorf("readyz does not say why: %s", b)
	}
	writeFile(t, path, strings.Replace(twoLimiters, "limit: 5", "limit: 6", 1))
	eventually(t, "the whole file to be applied", func() bool { return ts.limitOf() == 6 })

	// Saying so in the file removes a limiter.
	writeFile(t, path, half+"removed_limiters: [search]\n")
	eventually(t, "the removal to be applied", func() bool {
		code, _, _ := ts.do("POST", "/v1/check", `{"limiter":"search","attributes":{"user":"u"}}`)
		return code == 404
	})
}

// TestWatchRecovers: deleting the file is logged and reported, and putting
// the same content back clears the failure, even after a SIGHUP-style
// Reload recorded it.
func TestWatchRecovers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, limitConfig(3))
	var logs syncbuf.Buffer
	ts := newTestServer(t, limitConfig(3), nil, func(s *Server) {
		s.ConfigPath, s.WatchConfig = path, true
		s.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err == nil {
		t.Fatal("Reload of a deleted file succeeded")
	}
	eventually(t, "the deletion to be logged", func() bool {
		return strings.Contains(logs.String(), "the configuration file is gone or unreadable")
	})
	writeFile(t, path, limitConfig(3))
	eventually(t, "the failure to clear", func() bool {
		return testutil.ToFloat64(ts.metrics.lastReloadOK) == 1
	})
	if _, _, b := ts.do("GET", "/readyz", ""); strings.Contains(string(b), "last_reload_error") {
		t.Errorf("readyz after the file came back: %s", b)
	}
}

// TestWatchWaitsForQuiet: a file written in place in two steps a moment
// apart is read once, whole, after it has gone quiet.
func TestWatchWaitsForQuiet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, twoLimiters)
	ts := newTestServer(t, twoLimiters, nil, func(s *Server) {
		s.ConfigPath, s.WatchConfig = path, true
	})
	whole := strings.Replace(twoLimiters, "limit: 5", "limit: 6", 1)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	half := len(whole) / 2
	f.WriteString(whole[:half])
	time.Sleep(250 * time.Millisecond)
	f.WriteString(whole[half:])
	f.Close()
	eventually(t, "the whole file to be applied", func() bool { return ts.limitOf() == 6 })
	if got := testutil.ToFloat64(ts.metrics.reloads.WithLabelValues("failure")); got != 0 {
		t.Errorf("%v failed reloads: the half-written file was read", got)
	}
}
