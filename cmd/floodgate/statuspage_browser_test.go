package main

// TestStatusPageInBrowser opens the status page of a real `floodgate serve`
// (the built-in sample configuration) in headless Chromium while
// `floodgate load` runs against it. scripts/test.sh installs chromium.
//
// With FLOODGATE_SCREENSHOT=path it also lets the load run for a minute and
// saves a screenshot of the page there (docs/status-page.png is one):
//
//	FLOODGATE_SCREENSHOT=$PWD/docs/status-page.png go test -run Browser ./cmd/floodgate

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

func TestStatusPageInBrowser(t *testing.T) {
	dir := t.TempDir()
	const token = "page-test-token"
	addr := net.JoinHostPort(freeAddr(t))
	base := "http://" + addr
	serve := exec.Command(binary, "serve", "--http", addr, "--grpc", "-", "--admin-token", token, "--log-level", "warn")
	serve.Dir = dir // no floodgate.yaml here: the built-in sample serves
	serve.Stderr = os.Stderr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Kill(); serve.Wait() })
	waitReady(t, base)
	limiters := sampleLimiters(t, base)

	ctx, problems := openBrowser(t, dir, token)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/status/"),
		chromedp.WaitVisible(chromedp.CSS(`#limiter-api canvas`)),
	); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("main section h2")].map(h => h.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, limiters) {
		t.Errorf("page shows limiters %q, want the sample's %q", names, limiters)
	}

	// The chart moves while `floodgate load` runs.
	const chart = `document.querySelector("#limiter-api canvas").toDataURL()`
	before, err := chromedp.Run(ctx, chromedp.Evaluate[string](chart))
	if err != nil {
		t.Fatal(err)
	}
	screenshot := os.Getenv("FLOODGATE_SCREENSHOT")
	duration := "40s"
	if screenshot != "" {
		duration = "90s"
	}
	load := exec.Command(binary, "load", "--addr", base, "--limiter", "api", "--attribute", "user",
		"--keys", "20", "--dist", "zipf", "--rate", "300", "--duration", duration, "--quiet")
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { load.Process.Kill(); load.Wait() })
	var now string
	waitWithin(t, "the api chart to show the load", 20*time.Second, func() bool {
		after, err := chromedp.Run(ctx, chromedp.Evaluate[string](chart))
		if err != nil {
			return false
		}
		now, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#limiter-api .now`)))
		return err == nil && after != before && strings.Contains(now, "allowed")
	})
	t.Logf("api under load: %s", now)

	// A key denied now is in the top list within a few seconds.
	for i := 0; i < 40; i++ { // per-user admits 20 a second
		postCheck(t, base, `{"limiter":"api","attributes":{"user":"mallory-in-test"}}`)
	}
	var row string
	waitWithin(t, "mallory-in-test among per-user's top denied keys", 8*time.Second, func() bool {
		var err error
		row, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#limiter-api tr[data-rule="per-user"]`)))
		return err == nil && strings.Contains(row, "mallory-in-test")
	})

	if screenshot != "" {
		time.Sleep(time.Minute) // a minute of load on the chart
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(screenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range problems() {
		t.Errorf("browser: %s", p)
	}
}

// openBrowser starts headless Chromium, its profile in dir, sending token
// as the bearer token of every request. problems returns every console
// message, exception and browser log entry of warning level or above so
// far.
func openBrowser(t *testing.T, dir, token string) (ctx context.Context, problems func() []string) {
	t.Helper()
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Fatal("headless Chromium is required: apt-get install chromium (scripts/test.sh installs it)")
	}
	ctx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(dir, "chromium")),
		chromedp.WindowSize(1400, 1100),
	)
	t.Cleanup(cancel)
	ctx, cancel = chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)

	var mu sync.Mutex
	var seen []string
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
				mu.Unlock()
			}
		}
	}()
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders,
		network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + token}}); err != nil {
		t.Fatal(err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("floodgate serve at %s not ready: %v", base, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sampleLimiters returns the names of the served limiters, in order.
func sampleLimiters(t *testing.T, base string) []string {
	t.Helper()
	resp, err := http.Get(base + "/v1/limiters")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Limiters []struct{ Name string } }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range out.Limiters {
		names = append(names, l.Name)
	}
	if len(names) == 0 {
		t.Fatal("the sample configuration has no limiters")
	}
	return names
}

// postCheck asks POST /v1/check and fails unless it answers 200.
func postCheck(t *testing.T, base, body string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/check: %d", resp.StatusCode)
	}
}
