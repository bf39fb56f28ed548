package server

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate/internal/syncbuf"
)

// watchedEnvoy serves dir's Envoy files, logging into logs (shown when
// the test fails).
func watchedEnvoy(t *testing.T, dir string, logs *syncbuf.Buffer, tweak func(*Server)) (*testServer, rlsv3.RateLimitServiceClient) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	ts := newTestServer(t, testConfig, nil, func(s *Server) {
		s.GRPCAddr = "127.0.0.1:0"
		s.EnvoyConfigDir = dir
		s.Logger = slog.New(slog.NewTextHandler(logs, nil))
		if tweak != nil {
			tweak(s)
		}
	})
	return ts, rlsv3.NewRateLimitServiceClient(dial(t, ts.GRPCAddress()))
}

// TestEnvoyFileGoneForAMoment moves a domain's file away and back, as a
// deployment may: the domain keeps its limits (and its counts) all the
// while, with a WARN line naming it and the metric set, and both clear when
// the file is back.
func TestEnvoyFileGoneForAMoment(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	writeFile(t, file, envoyFile(2))
	var logs syncbuf.Buffer
	ts, c := watchedEnvoy(t, dir, &logs, func(s *Server) {
		s.WatchConfig = true
		s.EnvoyRemoveAfter = time.Minute
	})
	for i := 0; i < 2; i++ {
		if got := ask(t, c, "edge", "remote_address", "10.0.0.1").OverallCode; got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("hit %d: %v", i+1, got)
		}
	}
	aside := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.Rename(file, aside); err != nil {
		t.Fatal(err)
	}
	missing := func() float64 { return testutil.ToFloat64(ts.envoyKeep.missing.WithLabelValues("edge")) }
	eventually(t, "the missing file to be noticed", func() bool {
		return strings.Contains(logs.String(), "envoy domain file is gone") && missing() == 1
	})
	if !strings.Contains(logs.String(), "domain=edge") {
		t.Errorf("the WARN line does not name the domain:\n%s", logs.String())
	}
	if got := ask(t, c, "edge", "remote_address", "10.0.0.1").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a spent key with its file gone: %v, want OVER_LIMIT (the last limits and counts)", got)
	}
	if got := ask(t, c, "edge", "remote_address", "10.0.0.2").Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != 2 {
		t.Errorf("a fresh key with its file gone is limited at %d, want 2", got)
	}
	if err := os.Rename(aside, file); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the file to be back", func() bool {
		return strings.Contains(logs.String(), "envoy domain file is back") && testutil.CollectAndCount(ts.envoyKeep.missing) == 0
	})
	if got := ask(t, c, "edge", "remote_address", "10.0.0.1").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a spent key after its file came back: %v, want OVER_LIMIT", got)
	}
	if got := testutil.ToFloat64(ts.envoyKeep.removed); got != 0 {
		t.Errorf("%v domains removed", got)
	}
}

// TestEnvoyFileGoneForGood deletes a domain's file and reloads once, as
// SIGHUP does, with no watcher: the domain is served until EnvoyRemoveAfter
// has passed, and then removed by the reload the server schedules, with a
// WARN line and the counter.
func TestEnvoyFileGoneForGood(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	writeFile(t, file, envoyFile(2))
	var logs syncbuf.Buffer
	const after = 700 * time.Millisecond
	ts, c := watchedEnvoy(t, dir, &logs, func(s *Server) { s.EnvoyRemoveAfter = after })
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	removedAt := time.Now().Add(after)
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := ts.envoy.Config().Domains(); len(got) != 1 || got[0] != "edge" {
		t.Fatalf("domains right after the file went: %v, want [edge]", got)
	}
	if got := ask(t, c, "edge", "remote_address", "10.0.0.1").Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != 2 {
		t.Errorf("limit with the file just gone: %d, want 2", got)
	}
	eventually(t, "the domain to be removed", func() bool { return len(ts.envoy.Config().Domains()) == 0 })
	if early := time.Until(removedAt); early > 0 {
		t.Errorf("removed %v before EnvoyRemoveAfter had passed", early)
	}
	if !strings.Contains(logs.String(), "envoy domain removed") || !strings.Contains(logs.String(), "level=WARN msg=\"envoy domain removed") {
		t.Errorf("no WARN line for the removal:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(ts.envoyKeep.removed); got != 1 {
		t.Errorf("floodgate_envoy_domains_removed_total = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(ts.envoyKeep.missing); got != 0 {
		t.Errorf("%d floodgate_envoy_domain_file_missing series left after the removal", got)
	}
}

// TestEnvoyTornWrite rewrites a domain's file in place in two parts 0.4s
// apart. The first part alone parses (a descriptor with no rate_limit:
// unlimited), but the watcher waits for the directory to go quiet and
// loads the file only whole.
func TestEnvoyTornWrite(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	writeFile(t, file, envoyFile(2))
	var logs syncbuf.Buffer
	ts, c := watchedEnvoy(t, dir, &logs, func(s *Server) { s.WatchConfig = true })
	loads := testutil.ToFloat64(ts.metrics.reloads.WithLabelValues("success")) // Open's
	whole := envoyFile(3)
	cut := strings.Index(whole, "    rate_limit")
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(whole[:cut])
	time.Sleep(400 * time.Millisecond)
	f.WriteString(whole[cut:])
	f.Close()
	limit := func() uint32 {
		return ask(t, c, "edge", "remote_address", "10.0.0.9").Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	eventually(t, "the whole file to be loaded", func() bool { return limit() == 3 })
	if got := testutil.ToFloat64(ts.metrics.reloads.WithLabelValues("success")) - loads; got != 1 {
		t.Errorf("%v reloads, want 1: the half-written file was loaded\n%s", got, logs.String())
	}
}
