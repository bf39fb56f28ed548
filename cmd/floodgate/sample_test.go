package main

import (
	"bytes"
	"os"
	"path/filepath"
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
