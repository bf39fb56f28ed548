package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-go/floodgate/envoy"
)

const envoyExample = deployDir + "/kubernetes/envoy-example"

// TestEnvoyExampleConfig parses the example's Envoy configuration with
// Envoy's own API definitions and their validation rules, and checks that
// its rate limit filter asks floodgate's gRPC port for a domain that the
// example's domain files define.
func TestEnvoyExampleConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(envoyExample, "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy v3 bootstrap: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}

	// The rate limit filter and its cluster.
	var rl *ratelimitv3.RateLimit
	for _, l := range boot.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					var r ratelimitv3.RateLimit
					if hf.GetTypedConfig().UnmarshalTo(&r) == nil {
						rl = &r
					}
				}
			}
		}
	}
	if rl == nil {
		t.Fatal("envoy.yaml has no envoy.filters.http.ratelimit filter")
	}
	cluster := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	var target string
	for _, c := range boot.GetStaticResources().GetClusters() {
		if c.GetName() != cluster {
			continue
		}
		if c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
			t.Errorf("cluster %s does not speak HTTP/2, which gRPC needs", cluster)
		}
		for _, e := range c.GetLoadAssignment().GetEndpoints() {
			for _, lb := range e.GetLbEndpoints() {
				a := lb.GetEndpoint().GetAddress().GetSocketAddress()
				target = a.GetAddress() + ":" + strconv.Itoa(int(a.GetPortValue()))
			}
		}
	}
	if target != "floodgate:8081" {
		t.Errorf("the rate limit service cluster %q points at %q, want the floodgate Service's grpc port, floodgate:8081", cluster, target)
	}
	conf, err := envoy.LoadDir(filepath.Join(envoyExample, "ratelimit", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(conf.Domains(), rl.GetDomain()) {
		t.Errorf("the rate limit filter asks for domain %q; the example's files define %v", rl.GetDomain(), conf.Domains())
	}
}

// TestComposeFile checks compose.yaml against the Kubernetes example it
// mirrors: the same three services, the same environment for floodgate,
// the same files mounted.
func TestComposeFile(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Restart     string            `yaml:"restart"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Build       *struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
		} `yaml:"services"`
	}
	decodeFile(t, "../../compose.yaml", &compose)
	for _, name := range []string{"envoy", "floodgate", "redis"} {
		if _, ok := compose.Services[name]; !ok {
			t.Errorf("compose.yaml: no service %s", name)
		}
	}
	fg := compose.Services["floodgate"]
	if fg.Build == nil || fg.Build.Dockerfile != "Containerfile" || fg.Build.Context != "." {
		t.Errorf("compose.yaml: floodgate should build the repository's Containerfile")
	}
	// It exits when Redis refuses it at start, and relies on the runtime
	// to start it again (docs/operations.md).
	if r := fg.Restart; r != "always" && r != "unless-stopped" && !strings.HasPrefix(r, "on-failure") {
		t.Errorf("compose.yaml: floodgate's restart policy %q: it exits when Redis is not up yet; want unless-stopped, always or on-failure", r)
	}
	if got := strings.Join(fg.Command, " "); got != "/bin/ratelimit" {
		t.Errorf("compose.yaml: floodgate's command %q: the example runs as the reference image does, /bin/ratelimit on its environment alone", got)
	}

	b := loadBundle(t, envoyExample)
	want := map[string]string{}
	for _, o := range b.kind("Deployment") {
		var d k8sDeployment
		o.as(t, &d)
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Image == "floodgate" {
				for _, e := range c.Env {
					want[e.Name] = e.Value
				}
			}
		}
	}
	for name, v := range fg.Environment {
		checkEnvName(t, "compose.yaml: floodgate", name)
		if want[name] != v {
			t.Errorf("compose.yaml: floodgate's %s=%q, the Kubernetes example's is %q", name, v, want[name])
		}
	}
	for name := range want {
		if _, ok := fg.Environment[name]; !ok {
			t.Errorf("compose.yaml: floodgate lacks %s, which the Kubernetes example sets", name)
		}
	}
	for svc, s := range compose.Services {
		for _, v := range s.Volumes {
			host, _, _ := strings.Cut(v, ":")
			if _, err := os.Stat(filepath.Join("../..", host)); err != nil {
				t.Errorf("compose.yaml: %s mounts %s: %v", svc, host, err)
			}
		}
	}
}

// TestSystemdUnit checks the unit with systemd-analyze (syntax, and an
// exposure score of its sandboxing) and runs the binary with its ExecStart
// flags.
func TestSystemdUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze is required to check the unit: apt-get install systemd")
	}
	data, err := os.ReadFile(filepath.Join(deployDir, "systemd", "floodgate.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "floodgate.service")
	write(t, unit, strings.ReplaceAll(string(data), "/usr/local/bin/floodgate", binary))
	if out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, _ := exec.Command("systemd-analyze", "security", "--offline=yes", unit).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security printed no exposure level:\n%s", out)
	}
	if score, _ := strconv.ParseFloat(string(m[1]), 64); score > 2 {
		t.Errorf("the unit's exposure level is %.1f, want at most 2 (well sandboxed):\n%s", score, out)
	}

	exec := regexp.MustCompile(`(?m)^ExecStart=(\S+) (.*)$`).FindStringSubmatch(string(data))
	if exec == nil || exec[1] != "/usr/local/bin/floodgate" {
		t.Fatalf("the unit's ExecStart should run /usr/local/bin/floodgate: %q", exec)
	}
	args := strings.Fields(exec[2])
	config, ok := flagValue(args, "config")
	if args[0] != "serve" || !ok {
		t.Fatalf("ExecStart should be floodgate serve --config FILE: %q", args)
	}
	sample, err := filepath.Abs("floodgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"serve"}, localArgs(args[1:], func(p string) string {
		if p == config {
			return sample
		}
		return ""
	})...)
	argv = append(argv, "--http=127.0.0.1:0", "--grpc=127.0.0.1:0", "--log-format=json")
	svc := startArgs(t, t.TempDir(), nil, sample, argv...)
	if code, _ := svc.call("GET", "/healthz", ""); code != 200 {
		t.Errorf("GET /healthz: %d", code)
	}
	if err := svc.stop(); err != nil {
		t.Errorf("floodgate serve did not stop cleanly: %v", err)
	}
}
