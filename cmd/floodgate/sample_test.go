package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/config"
)

// TestSampleConfigIsTheRepositoryOne keeps the embedded sample identical to
// the repository's floodgate.yaml (go:embed cannot reach the parent
// directory, so the file is copied).
func TestSampleConfigIsTheRepositoryOne(t *testing.T) {
	root, err := os.ReadFile(filepath.Join("..", "..", "floodgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(root, sampleConfig) {
		t.Fatal("cmd/floodgate/floodgate.yaml differs from ../../floodgate.yaml: copy the repository's file over it")
	}
	if _, err := config.Parse("floodgate.yaml", sampleConfig); err != nil {
		t.Fatalf("the sample configuration is invalid: %v", err)
	}
}

// TestSampleRedisLine checks the sample's commented Redis store: taken as
// it is written, it is valid and has the default deadline, the one
// docs/operations.md recommends until the store's latency is measured; so
// does the Kubernetes example's.
func TestSampleRedisLine(t *testing.T) {
	var line string
	for l := range strings.Lines(string(sampleConfig)) {
		if s := strings.TrimSpace(l); strings.HasPrefix(s, "# redis:") {
			line = strings.TrimPrefix(s, "# ")
			break
		}
	}
	if line == "" {
		t.Fatal("the sample has no commented redis: line")
	}
	parse := func(store string) *config.Redis {
		t.Helper()
		c, err := config.Parse("floodgate.yaml", []byte("store:\n  "+store+"\nlimiters: [{name: a, rules: [{name: r, algorithm: gcra, limit: 1, window: 1s}]}]\n"))
		if err != nil {
			t.Fatalf("%s: %v", store, err)
		}
		return c.Store.Redis
	}
	got, def := parse(line), parse(`redis: {url: "redis://127.0.0.1:6379/0"}`)
	if got.Deadline != def.Deadline {
		t.Errorf("the sample suggests deadline %v; the default is %v", got.Deadline, def.Deadline)
	}
	k8s, err := config.Load(filepath.Join("..", "..", "deploy", "kubernetes", "floodgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := k8s.Store.Redis.Deadline; got != def.Deadline {
		t.Errorf("deploy/kubernetes/floodgate.yaml sets deadline %v; the default is %v", got, def.Deadline)
	}
	ops, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("The default, %d ms,", def.Deadline.Milliseconds()); !strings.Contains(string(ops), want) {
		t.Errorf("docs/operations.md does not say %q", want)
	}
}
