package main

import (
	"debug/elf"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/server"
)

// maxImageBytes is the image's size budget.
const maxImageBytes = 32 << 20

// TestImage builds the container image with scripts/image.sh (podman, with
// a builder made from this machine's Go toolchain, so no registry is
// needed) and checks it without running a container: its configuration,
// its size, and the binary inside, which must be static and must run
// "floodgate version" and "floodgate validate" on the configuration it
// ships. A machine that cannot build images fails the test: it never
// skips.
func TestImage(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is required to build the image: apt-get install podman buildah (scripts/test.sh installs them)")
	}
	const (
		image   = "localhost/floodgate-imagetest:latest"
		version = "v0.0.0-imagetest"
	)
	cmd := exec.Command("./scripts/image.sh")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "BUILDER=local", "IMAGE="+image, "VERSION="+version)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/image.sh cannot build the image on this machine: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", image).Run() })
	m := regexp.MustCompile(`(?m)^image: (\S+) size: (\d+) bytes`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("scripts/image.sh did not report the size:\n%s", out)
	}
	if string(m[1]) != image {
		t.Errorf("image.sh built %s, want %s", m[1], image)
	}
	reported, _ := strconv.ParseInt(string(m[2]), 10, 64)

	var inspect []struct {
		Size   int64
		Config struct {
			User         string
			ExposedPorts map[string]struct{}
			Entrypoint   []string
			Cmd          []string
			Env          []string
			WorkingDir   string
		}
	}
	raw, err := exec.Command("podman", "image", "inspect", image).Output()
	if err != nil || json.Unmarshal(raw, &inspect) != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect %s: %v\n%s", image, err, raw)
	}
	img := inspect[0]
	if img.Size != reported {
		t.Errorf("image.sh reported %d bytes, podman says %d", reported, img.Size)
	}
	if img.Size <= 0 || img.Size >= maxImageBytes {
		t.Errorf("image size %d bytes, want under %d", img.Size, maxImageBytes)
	}
	t.Logf("image %s: %d bytes", image, img.Size)

	c := img.Config
	if got, want := strings.Join(c.Entrypoint, " "), "/usr/local/bin/floodgate serve"; got != want {
		t.Errorf("entrypoint %q, want %q", got, want)
	}
	if len(c.Cmd) != 0 {
		t.Errorf("cmd %q: floodgate serve should start with no flags", c.Cmd)
	}
	// A container listens on all its interfaces: its network is the boundary.
	for _, want := range []string{"FLOODGATE_HTTP=:8080", "FLOODGATE_GRPC=:8081"} {
		if !slices.Contains(c.Env, want) {
			t.Errorf("image environment %q lacks %s", c.Env, want)
		}
	}
	uid, _, _ := strings.Cut(c.User, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("user %q: want a numeric user other than root", c.User)
	}
	for _, addr := range []string{server.DefaultHTTPAddr, server.DefaultGRPCAddr} {
		_, port, _ := net.SplitHostPort(addr)
		if _, ok := c.ExposedPorts[port+"/tcp"]; !ok {
			t.Errorf("port %s/tcp (the default %s) is not exposed: %v", port, addr, c.ExposedPorts)
		}
	}

	mounted, err := exec.Command("podman", "image", "mount", image).Output()
	if err != nil {
		t.Fatalf("podman image mount %s: %v", image, err)
	}
	t.Cleanup(func() { exec.Command("podman", "image", "unmount", image).Run() })
	root := strings.TrimSpace(string(mounted))
	bin := filepath.Join(root, "usr", "local", "bin", "floodgate")
	checkStatic(t, bin)
	// Manifests written for the reference service's image run /bin/ratelimit.
	if dest, err := os.Readlink(filepath.Join(root, "bin", "ratelimit")); err != nil || dest != "/usr/local/bin/floodgate" {
		t.Errorf("/bin/ratelimit: %q %v, want a link to /usr/local/bin/floodgate", dest, err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "ssl", "certs", "ca-certificates.crt")); err != nil {
		t.Errorf("no CA certificates in the image: %v", err)
	}

	got, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("floodgate version: %v\n%s", err, got)
	}
	for _, want := range []string{"floodgate " + version + "\n", "go:       " + runtime.Version()} {
		if !strings.Contains(string(got), want) {
			t.Errorf("floodgate version printed\n%s\nwant it to contain %q", got, want)
		}
	}
	config := filepath.Join(root, c.WorkingDir, "floodgate.yaml")
	if got, err := exec.Command(bin, "validate", config).CombinedOutput(); err != nil {
		t.Errorf("floodgate validate on the image's %s/floodgate.yaml: %v\n%s", c.WorkingDir, err, got)
	}
}

// checkStatic fails unless the ELF file at path needs no dynamic loader or
// shared library (a scratch image has none).
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("the image's binary: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a dynamic loader: it is not static", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", path, libs)
	}
}
