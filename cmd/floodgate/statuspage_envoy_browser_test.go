package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/internal/redistest"
)

// TestStatusPageEnvoyDomainsInBrowser opens the status page of floodgate
// started as Envoy's reference service (its environment alone, a real
// Redis, Envoy domains and no limiters of floodgate's own) in headless
// Chromium: the domain is on the page with its decisions and its top
// denied keys, block-list refusals (requests_per_unit: 0) included; once
// its file is deleted, the page says that nothing is configured.
func TestStatusPageEnvoyDomainsInBrowser(t *testing.T) {
	dir := t.TempDir()
	srv := redistest.Start(t)
	root := filepath.Join(dir, "runtime")
	domains := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(domains, 0o755); err != nil {
		t.Fatal(err)
	}
	edge := filepath.Join(domains, "edge.yaml")
	const domain = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`
	if err := os.WriteFile(edge, []byte(domain), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "page-test-token"
	httpAddr, grpcAddr, debugAddr := net.JoinHostPort(freeAddr(t)), net.JoinHostPort(freeAddr(t)), net.JoinHostPort(freeAddr(t))
	env := []string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr, "REDIS_TIMEOUT=2s", "USE_STATSD=false", "LOG_LEVEL=warn",
		"FLOODGATE_ADMIN_TOKEN=" + token,
		"FLOODGATE_ENVOY_REMOVE_AFTER=1s", // a deleted domain file is gone after a second
	}
	for name, addr := range map[string]string{"": httpAddr, "GRPC_": grpcAddr, "DEBUG_": debugAddr} {
		host, port, _ := strings.Cut(addr, ":")
		env = append(env, name+"HOST="+host, name+"PORT="+port)
	}
	ref := exec.Command(binary)
	ref.Dir, ref.Env, ref.Stderr = dir, env, os.Stderr
	if err := ref.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Process.Kill(); ref.Wait() })
	base := "http://" + httpAddr
	waitReady(t, base)

	ctx, problems := openBrowser(t, dir, token)
	const section = `section[id="limiter-envoy.edge"]`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/status/"),
		chromedp.WaitVisible(chromedp.CSS(section+` canvas`)),
	); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("main section h2")].map(h => h.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"envoy.edge"}; !slices.Equal(names, want) {
		t.Errorf("page shows limiters %q, want %q", names, want)
	}
	header, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`header`)))
	if err != nil || !strings.Contains(header, "0 limiters, 1 Envoy domains") {
		t.Errorf("page header %q (%v), want it to count the Envoy domain", header, err)
	}
	// The header's clock is a 24-hour one, as the chart's axis is.
	waitWithin(t, "the header's update time", 5*time.Second, func() bool {
		updated, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#updated`)))
		return err == nil && strings.HasPrefix(updated, "updated ")
	})
	if updated, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#updated`))); !regexp.MustCompile(`^updated \d\d:\d\d:\d\d$`).MatchString(updated) {
		t.Errorf("header says %q, want a 24-hour hh:mm:ss", updated)
	}
	// An idle limiter's chart spans 0 to 1 decision a second, not 0 to 100.
	if top, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`charts.get("envoy.edge").plot.scales.y.max`)); err != nil || top != 1 {
		t.Errorf("idle chart's y axis tops at %v (%v), want 1", top, err)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(key, value string) {
		t.Helper()
		_, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("long-key-", 30)
	for range 10 {
		ask("remote_address", "10.0.0.1") // 2 admitted, 8 denied
		ask("blocked", "10.6.6.6")        // refused by requests_per_unit: 0
		ask("remote_address", long)
	}
	for rule, key := range map[string]string{"remote_address": "remote_address=10.0.0.1", "blocked": "blocked=10.6.6.6"} {
		waitWithin(t, key+" among "+rule+"'s top denied keys", 8*time.Second, func() bool {
			row, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(section+` tr[data-rule="`+rule+`"]`)))
			return err == nil && strings.Contains(row, key)
		})
	}
	// A long key is cut short on one line (its title holds all of it),
	// rather than wrapping the counts beside it.
	height, err := chromedp.Run(ctx, chromedp.Evaluate[float64](
		`[...document.querySelectorAll('`+section+` .keys li')].find(li => li.querySelector("code").title.startsWith("remote_address=long-key-")).getBoundingClientRect().height`))
	if err != nil || height == 0 || height > 30 {
		t.Errorf("the long key's row is %vpx high (%v), want one line", height, err)
	}
	waitWithin(t, "the chart to count the denials", 30*time.Second, func() bool {
		now, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(section+` .now`)))
		return err == nil && strings.Contains(now, "denied")
	})

	// Nothing configured is said, not failed.
	if err := os.Remove(edge); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, "the page to say that nothing is configured", 10*time.Second, func() bool {
		state, err := chromedp.Run(ctx, chromedp.Evaluate[string](
			`document.getElementById("empty").hidden + " " + document.querySelectorAll("main section").length + " " + document.getElementById("updated").textContent`))
		return err == nil && strings.HasPrefix(state, "false 0 updated")
	})
	for _, p := range problems() {
		t.Errorf("browser: %s", p)
	}
}
