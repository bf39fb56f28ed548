package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store/memory"
)

// walkthroughStart is the instant the README's outputs were taken at, 22:00
// in New York on January 31: two hours before the monthly budgets roll. The
// walkthrough runs at that one instant (a real run takes a few seconds, so
// its retry-after values come out a little shorter).
var walkthroughStart = time.Date(2026, 2, 1, 3, 0, 0, 0, time.UTC)

// startGateway starts the fake models and the gateway on loopback, on a
// manual clock, and returns the gateway's URL.
func startGateway(t *testing.T, clock floodgate.Clock) string {
	t.Helper()
	var models []*model
	for _, name := range upstreamNames {
		m, err := startModel(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		models = append(models, m)
	}
	store := memory.New(nil)
	t.Cleanup(func() { store.Close() })
	gw, err := newGateway(store, clock, models)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// step is one command of the README's walkthrough and the output it shows.
type step struct {
	line    int
	command string
	want    string
}

// readWalkthrough returns the "$ curl ..." commands of README.md's console
// blocks, each with the output lines that follow it.
func readWalkthrough(t *testing.T) []step {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var steps []step
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "```console":
			in = true
		case line == "```":
			in = false
		case !in:
		case strings.HasPrefix(line, "$ curl "):
			steps = append(steps, step{line: i + 1, command: strings.TrimPrefix(line, "$ ")})
		case strings.HasPrefix(line, "$ "):
			// Other commands (starting the gateway) are not replayed.
		case len(steps) > 0:
			s := &steps[len(steps)-1]
			s.want += line + "\n"
		}
	}
	return steps
}

// TestWalkthrough replays the README's curl commands against the gateway
// and checks that each prints what the README shows.
func TestWalkthrough(t *testing.T) {
	base := startGateway(t, clocktest.New(walkthroughStart))
	steps := readWalkthrough(t)
	if len(steps) < 10 {
		t.Fatalf("README.md holds %d curl commands; the walkthrough has more", len(steps))
	}
	for _, s := range steps {
		got, err := curl(base, s.command)
		if err != nil {
			t.Fatalf("README.md:%d: %s: %v", s.line, s.command, err)
		}
		if got != s.want {
			t.Errorf("README.md:%d: %s\ngot:\n%swant:\n%s", s.line, s.command, got, s.want)
		}
	}
}

// curl runs the subset of curl the walkthrough uses (-s, -X, -H, -d and a
// URL on localhost:8080) against base, and returns what curl would print.
func curl(base, command string) (string, error) {
	args, err := shellWords(command)
	if err != nil {
		return "", err
	}
	if len(args) == 0 || args[0] != "curl" {
		return "", fmt.Errorf("not a curl command")
	}
	method, url, body := "", "", ""
	header := http.Header{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		next := func() (string, error) {
			i++
			if i == len(args) {
				return "", fmt.Errorf("%s needs a value", a)
			}
			return args[i], nil
		}
		var v string
		switch a {
		case "-s":
			continue
		case "-X", "-H", "-d":
			if v, err = next(); err != nil {
				return "", err
			}
		default:
			if strings.HasPrefix(a, "-") || url != "" {
				return "", fmt.Errorf("unsupported argument %q", a)
			}
			url = a
			continue
		}
		switch a {
		case "-X":
			method = v
		case "-H":
			name, value, ok := strings.Cut(v, ":")
			if !ok {
				return "", fmt.Errorf("bad header %q", v)
			}
			header.Add(name, strings.TrimSpace(value))
		case "-d":
			body = v
			if method == "" {
				method = http.MethodPost
			}
			if header.Get("Content-Type") == "" {
				header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
		}
	}
	path, ok := strings.CutPrefix(url, "localhost:8080")
	if !ok {
		return "", fmt.Errorf("URL %q is not on localhost:8080", url)
	}
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header = header
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return string(out), err
}

// shellWords splits a command line into words, honouring single quotes.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			cur.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// TestRun starts the program itself on a free port, serves one request and
// shuts it down.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, pw, floodgate.SystemClock{})
		pw.Close()
	}()
	var base string
	sc := bufio.NewScanner(pr)
	for base == "" && sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "gateway listening on http://"); ok {
			base = "http://" + u
		}
	}
	if base == "" {
		t.Fatalf("the gateway did not say where it listens: %v", <-done)
	}
	go io.Copy(io.Discard, pr)

	out, err := curl(base, `curl -s localhost:8080/v1/complete -H 'Authorization: Bearer key-alice' -d '{"prompt":"hello world"}'`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"route":"primary"`) || !strings.Contains(out, `"cost":11`) {
		t.Errorf("first request answered %s", out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
