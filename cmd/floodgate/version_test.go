package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionCommand checks "floodgate version" and "--version" on a binary
// stamped the way the image and release builds stamp it, and on the plain
// test binary, whose values come from the build information alone.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	stamped := filepath.Join(t.TempDir(), "floodgate")
	if err := buildFloodgate(stamped, "-X main.version=v1.2.3 -X main.revision=0123456789abcdef -X main.revisionTime=2026-01-02T03:04:05Z"); err != nil {
		t.Fatal(err)
	}
	want := "floodgate v1.2.3\n" +
		"module:   github.com/floodgate-go/floodgate\n" +
		"revision: 0123456789abcdef\n" +
		"time:     2026-01-02T03:04:05Z\n" +
		"go:       " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, arg := range []string{"version", "--version", "-version"} {
		out, err := exec.Command(stamped, arg).Output()
		if err != nil || string(out) != want {
			t.Errorf("floodgate %s: %v\n%s\nwant\n%s", arg, err, out, want)
		}
	}

	out, err := exec.Command(binary, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "floodgate ") || lines[0] == "floodgate " ||
		lines[4] != "go:       "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("floodgate version (unstamped):\n%s", out)
	}
	if out, err := exec.Command(binary, "version", "extra").CombinedOutput(); exitCode(err) != exitUsage {
		t.Errorf("floodgate version extra: exit %d, want %d\n%s", exitCode(err), exitUsage, out)
	}
}
