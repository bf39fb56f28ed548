package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/redistest"
)

// TestReferenceCommandLines runs the binary with the argument vectors a
// container runtime builds from floodgate's image and the reference
// image's command: compose's command appended to the image's entrypoint
// (as in compose.yaml), a Kubernetes command replacing the entrypoint (the
// link /bin/ratelimit), and Kubernetes args after the entrypoint. Each
// must serve the reference's domains from its environment.
func TestReferenceCommandLines(t *testing.T) {
	entrypoint := imageEntrypoint(t)
	var compose struct {
		Services map[string]struct {
			Command []string `yaml:"command"`
		} `yaml:"services"`
	}
	decodeFile(t, "../../compose.yaml", &compose)
	command := compose.Services["floodgate"].Command
	if len(command) == 0 {
		t.Fatal("compose.yaml: floodgate has no command")
	}
	// The image's /bin/ratelimit is a link to floodgate.
	link := filepath.Join(t.TempDir(), "bin", "ratelimit")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		argv []string // argv[0] is the program run
	}{
		{"compose: entrypoint + command", append(append([]string{}, entrypoint...), command...)},
		{"kubernetes: command replaces the entrypoint", []string{link}},
		{"kubernetes: command replaces the entrypoint, by name", []string{"ratelimit"}},
		{"kubernetes: args after the entrypoint", append(append([]string{}, entrypoint...), "ratelimit")},
		{"entrypoint + command and arguments", append(append([]string{}, entrypoint...), "/bin/ratelimit", "-ignored")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			program := tc.argv[0]
			switch program {
			case entrypoint[0]:
				program = binary // the image's floodgate is the one built here
			case "ratelimit":
				program = link // found on the image's PATH
			}
			root := refRuntime(t)
			s := startReferenceProgram(t, referenceEnvFor(root, srv.Addr), program, tc.argv[1:]...)
			r := newRefTarget(t, s.grpc, s.http, root, false)
			r.expect(strings.Join(tc.argv, " "), r.ask("basic", []string{"key1", tc.name}), ok, refStatus{ok, 50, second, 49})
		})
	}
}

// imageEntrypoint returns the ENTRYPOINT of the repository's Containerfile.
func imageEntrypoint(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, found := strings.CutPrefix(line, "ENTRYPOINT "); found {
			var argv []string
			if err := json.Unmarshal([]byte(rest), &argv); err != nil || len(argv) == 0 {
				t.Fatalf("Containerfile: ENTRYPOINT %s: want the exec form, a JSON list: %v", rest, err)
			}
			return argv
		}
	}
	t.Fatal("Containerfile: no ENTRYPOINT")
	return nil
}
