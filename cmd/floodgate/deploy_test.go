package main

import (
	"cmp"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/server"
)

// The deploy tests check deploy/, compose.yaml and the systemd unit against
// the binary: probe paths are served, ports are the ones it listens on,
// flags are accepted (by running it with them), environment variables are
// ones it reads, mounted configuration passes validation.

const deployDir = "../../deploy"

// goRuntimeEnv are variables the Go runtime reads in any Go program.
var goRuntimeEnv = map[string]bool{"GOMEMLIMIT": true, "GOGC": true, "GOMAXPROCS": true, "GODEBUG": true}

// checkEnvName fails unless floodgate reads the environment variable name.
func checkEnvName(t *testing.T, where, name string) {
	t.Helper()
	switch {
	case goRuntimeEnv[name]:
	case strings.HasPrefix(name, "FLOODGATE_"):
		// serve's help names every variable of its own that it reads.
		out, _ := exec.Command(binary, "serve", "--help").CombinedOutput()
		if !strings.Contains(string(out), "$"+name) && !strings.Contains(string(out), name+" ") {
			t.Errorf("%s: environment variable %s is not one floodgate serve reads (serve --help names them)", where, name)
		}
	default:
		// The reference rate limit service's variables (REDIS_URL,
		// RUNTIME_ROOT, …), read by floodgate's reference-environment mode.
		if !knownEnvVar(name) {
			t.Errorf("%s: environment variable %s is not one floodgate reads", where, name)
		}
	}
}

// TestKubernetesManifests checks each kustomization under deploy/kubernetes.
func TestKubernetesManifests(t *testing.T) {
	for _, dir := range []string{"kubernetes", "kubernetes/envoy-example"} {
		t.Run(dir, func(t *testing.T) {
			b := loadBundle(t, filepath.Join(deployDir, dir))
			if len(b.kust.Images) != 1 || b.kust.Images[0].Name != "floodgate" {
				t.Errorf("%s: kustomization images: want one entry for the image name floodgate", dir)
			}
			deployments := checkDeployments(t, b)
			checkServices(t, b, deployments)
			checkPDBs(t, b, deployments)
		})
	}
}

// checkDeployments checks every Deployment and returns them by name.
func checkDeployments(t *testing.T, b *bundle) map[string]k8sDeployment {
	out := map[string]k8sDeployment{}
	for _, o := range b.kind("Deployment") {
		var d k8sDeployment
		o.as(t, &d)
		out[o.Metadata.Name] = d
		where := o.File + ": Deployment " + o.Metadata.Name
		if !matches(d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: the selector %v does not match the pod labels %v", where, d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Image == "floodgate" {
				checkFloodgateContainer(t, b, where+" container "+c.Name, d.Spec.Template.Spec, c)
			}
		}
	}
	if len(out) == 0 {
		t.Errorf("%s: no Deployment", b.dir)
	}
	return out
}

// checkFloodgateContainer checks a floodgate container statically, then
// runs the binary as the container would run it.
func checkFloodgateContainer(t *testing.T, b *bundle, where string, pod k8sPodSpec, c k8sContainer) {
	t.Helper()
	if !pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.RunAsUser == 0 {
		t.Errorf("%s: the pod should run as a non-root user (runAsNonRoot, runAsUser 65532 as in the image)", where)
	}
	// The reference-environment mode: the reference image's command, in
	// place of the image's entrypoint (command) or after it (args), as
	// the runtime builds the argument vector; or no command and no args
	// with the reference's environment (the image's entrypoint, floodgate
	// serve, then runs as the reference). Anything else passes args to
	// floodgate serve.
	argv0 := append(imageEntrypoint(t), c.Args...)
	if len(c.Command) > 0 {
		argv0 = append(append([]string{}, c.Command...), c.Args...)
	}
	envMode := strings.Join(referenceArgs(argv0[0], argv0[1:]), " ") == "ratelimit" ||
		len(c.Command) == 0 && len(c.Args) == 0 && referenceMode(func(name string) string { v, _ := c.env(name); return v })
	if len(c.Command) > 0 && !envMode {
		t.Errorf("%s: command %q replaces the image's entrypoint (floodgate serve); pass args, or /bin/ratelimit alone", where, c.Command)
	}
	if i := slices.IndexFunc(argv0, isReferenceCommand); envMode && i >= 0 && i+1 < len(argv0) {
		t.Errorf("%s: /bin/ratelimit is configured by the environment alone: %q after it are ignored", where, argv0[i+1:])
	}
	if _, ok := c.Resources.Limits["memory"]; !ok {
		t.Errorf("%s: no memory limit", where)
	}
	for _, e := range c.Env {
		checkEnvName(t, where, e.Name)
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			if _, ok := b.secretValue(t, ref.Name, ref.Key); !ok {
				t.Errorf("%s: %s comes from Secret %s key %s, which the kustomization does not define", where, e.Name, ref.Name, ref.Key)
			}
		}
	}

	// The ports floodgate listens on, from its flags or (in the reference
	// environment) PORT and GRPC_PORT, or the defaults.
	httpPort, grpcPort := listenPort(t, c, "http", "PORT", server.DefaultHTTPAddr), listenPort(t, c, "grpc", "GRPC_PORT", server.DefaultGRPCAddr)
	for name, p := range map[string]int{"http": httpPort, "grpc": grpcPort} {
		if c.portNumber(strconv.Itoa(p)) == 0 {
			t.Errorf("%s: floodgate listens for %s on %d, which is not a containerPort", where, name, p)
		}
	}
	probes := map[string]*k8sProbe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe}
	for path, p := range probes {
		switch {
		case p == nil || p.HTTPGet == nil:
			t.Errorf("%s: want an HTTP probe on %s", where, path)
		case p.HTTPGet.Path != path:
			t.Errorf("%s: probe path %s, want %s", where, p.HTTPGet.Path, path)
		case c.portNumber(p.HTTPGet.Port) != httpPort:
			t.Errorf("%s: probe %s on port %q, but floodgate serves HTTP on %d", where, path, p.HTTPGet.Port, httpPort)
		}
	}

	// The mounted ConfigMaps, written under a temporary root; whole
	// directories only, or updates never arrive.
	root := t.TempDir()
	mounts := map[string]string{} // mount path → directory under root
	for _, m := range c.VolumeMounts {
		cm := ""
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm = v.ConfigMap.Name
			}
		}
		if cm == "" {
			continue
		}
		if m.SubPath != "" {
			t.Errorf("%s: ConfigMap %s is mounted with subPath %s: a subPath mount never sees updates; mount the directory", where, cm, m.SubPath)
		}
		files, ok := b.configMaps[cm]
		if !ok {
			t.Errorf("%s: volume %s names ConfigMap %s, which the kustomization does not generate", where, m.Name, cm)
			continue
		}
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			write(t, filepath.Join(dir, name), string(data))
		}
		mounts[m.MountPath] = dir
	}
	local := func(path string) string { // a path in the container → under root
		for mp, dir := range mounts {
			if rest, ok := strings.CutPrefix(path, mp); ok && (rest == "" || rest[0] == '/') {
				return dir + rest
			}
		}
		return ""
	}

	var configFile, envoyDir string
	if envMode {
		envoyDir = filepath.Join(envOr(c, "RUNTIME_ROOT", "/srv/runtime_data/current"), envOr(c, "RUNTIME_SUBDIRECTORY", ""), envOr(c, "RUNTIME_APPDIRECTORY", "config"))
	} else {
		var ok bool
		if configFile, ok = flagValue(c.Args, "config"); !ok {
			t.Errorf("%s: no --config: the image's sample configuration would serve", where)
		}
		envoyDir, _ = flagValue(c.Args, "envoy-config-dir")
	}
	var validateArgs []string
	if configFile != "" {
		if local(configFile) == "" {
			t.Fatalf("%s: --config %s is not in a mounted ConfigMap", where, configFile)
		}
		validateArgs = append(validateArgs, local(configFile))
	}
	if envoyDir != "" {
		if local(envoyDir) == "" {
			t.Fatalf("%s: the Envoy configuration directory %s is not a mounted ConfigMap", where, envoyDir)
		}
		validateArgs = append(validateArgs, "--envoy-config-dir", local(envoyDir))
	}
	if len(validateArgs) == 0 {
		t.Fatalf("%s: no configuration to validate", where)
	}
	if out, err := exec.Command(binary, append([]string{"validate"}, validateArgs...)...).CombinedOutput(); err != nil {
		t.Errorf("%s: floodgate validate on the mounted configuration: %v\n%s", where, err, out)
	}

	// Run it: the container's flags with loopback addresses, its
	// environment, its configuration with the Redis address pointing at a
	// real Redis. Every flag must be accepted and the probes must answer.
	redis := redistest.Start(t)
	for _, dir := range mounts {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			data, _ := os.ReadFile(p)
			write(t, p, strings.ReplaceAll(string(data), "redis:6379", redis.Addr))
		}
	}
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil && f.SecretKeyRef != nil {
			v, _ = b.secretValue(t, f.SecretKeyRef.Name, f.SecretKeyRef.Key)
		} else if f != nil && f.ResourceFieldRef != nil {
			n, err := quantityBytes(c.Resources.Limits[strings.TrimPrefix(f.ResourceFieldRef.Resource, "limits.")])
			if err != nil {
				t.Fatalf("%s: %s: %v", where, e.Name, err)
			}
			v = strconv.FormatInt(n, 10)
		}
		env = append(env, e.Name+"="+strings.ReplaceAll(v, "redis:6379", redis.Addr))
	}
	var argv []string
	if envMode {
		// The reference-environment mode, on loopback ports of its own and
		// the mounted runtime directory; the ports were checked above.
		dir := local(envoyDir)
		argv = []string{"ratelimit"}
		env = append(env, "HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "LOG_FORMAT=json",
			"RUNTIME_ROOT="+filepath.Dir(dir), "RUNTIME_SUBDIRECTORY=.", "RUNTIME_APPDIRECTORY="+filepath.Base(dir))
	} else {
		argv = append([]string{"serve"}, localArgs(c.Args, local)...)
		argv = append(argv, "--http=127.0.0.1:0", "--grpc=127.0.0.1:0", "--log-format=json")
	}
	svc := startArgs(t, root, env, "", argv...)
	for path := range probes {
		waitFor(t, "GET "+path+" answers 200", func() bool {
			code, _ := svc.call("GET", path, "")
			return code == 200
		})
	}
	if grace := pod.TerminationGracePeriodSeconds; !envMode {
		d := server.DefaultShutdownTimeout
		if v, ok := flagValue(c.Args, "shutdown-timeout"); ok {
			d, _ = time.ParseDuration(v)
		}
		// docs/operations.md: drain a little longer than the readiness
		// probe takes to see the instance fail.
		var drain time.Duration
		if v, ok := flagValue(c.Args, "drain"); ok {
			drain, _ = time.ParseDuration(v)
		}
		if p := c.ReadinessProbe; p != nil {
			period, failures := cmp.Or(p.PeriodSeconds, 10), cmp.Or(p.FailureThreshold, 3) // Kubernetes' defaults
			if seen := time.Duration(period*failures) * time.Second; drain < seen {
				t.Errorf("%s: --drain %v, want at least the readiness probe's periodSeconds × failureThreshold (%v), so that the Service drops the pod before its listeners close", where, drain, seen)
			}
		}
		if grace == nil || time.Duration(*grace)*time.Second <= drain+d {
			t.Errorf("%s: terminationGracePeriodSeconds should exceed --drain plus --shutdown-timeout (%v)", where, drain+d)
		}
	}
	checkMemoryLimit(t, where, c)
	if err := svc.stop(); err != nil {
		t.Errorf("%s: floodgate serve did not stop cleanly: %v\n%s", where, err, svc.logText())
	}
}

// localArgs rewrites a container's args for a run on this machine: paths in
// mounted ConfigMaps point under the test's root, the listen addresses are
// dropped (the caller adds loopback ones after them).
func localArgs(args []string, local func(string) string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "http" || name == "grpc" {
			if !hasValue {
				i++
			}
			continue
		}
		if hasValue {
			if l := local(value); l != "" {
				a = "--" + name + "=" + l
			}
		} else if l := local(a); l != "" {
			a = l
		}
		out = append(out, a)
	}
	return out
}

func envOr(c k8sContainer, name, def string) string {
	if v, ok := c.env(name); ok {
		return v
	}
	return def
}

// listenPort is the port floodgate serves on in c: from the flag, else (in
// the reference environment) the variable, else the default address.
func listenPort(t *testing.T, c k8sContainer, flagName, envName, def string) int {
	t.Helper()
	addr := def
	if v, ok := flagValue(c.Args, flagName); ok {
		addr = v
	} else if v, ok := c.env(envName); ok && len(c.Args) == 0 {
		addr = ":" + v
	}
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("container %s: %s address %q has no port", c.Name, flagName, addr)
	}
	return n
}

// checkServices checks that each Service selects a Deployment's pods and
// targets ports they have.
func checkServices(t *testing.T, b *bundle, deployments map[string]k8sDeployment) {
	for _, o := range b.kind("Service") {
		var s k8sService
		o.as(t, &s)
		where := o.File + ": Service " + o.Metadata.Name
		var pods []k8sContainer
		for _, d := range deployments {
			if matches(s.Spec.Selector, d.Spec.Template.Metadata.Labels) {
				pods = append(pods, d.Spec.Template.Spec.Containers...)
			}
		}
		if len(pods) == 0 {
			t.Errorf("%s: the selector %v matches no Deployment's pods", where, s.Spec.Selector)
		}
		for _, p := range s.Spec.Ports {
			target := p.TargetPort
			if target == "" {
				target = strconv.Itoa(p.Port)
			}
			found := false
			for _, c := range pods {
				found = found || c.portNumber(target) != 0
			}
			if !found {
				t.Errorf("%s: port %s targets %q, which no selected container has", where, p.Name, target)
			}
		}
	}
}

// checkPDBs checks that each PodDisruptionBudget covers a Deployment that
// can honour it.
func checkPDBs(t *testing.T, b *bundle, deployments map[string]k8sDeployment) {
	for _, o := range b.kind("PodDisruptionBudget") {
		var p k8sPDB
		o.as(t, &p)
		where := o.File + ": PodDisruptionBudget " + o.Metadata.Name
		covered := false
		for _, d := range deployments {
			if matches(p.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels) {
				covered = true
				if p.Spec.MinAvailable != nil && *p.Spec.MinAvailable >= d.Spec.Replicas {
					t.Errorf("%s: minAvailable %d with %d replicas blocks every voluntary eviction", where, *p.Spec.MinAvailable, d.Spec.Replicas)
				}
			}
		}
		if !covered {
			t.Errorf("%s: the selector matches no Deployment", where)
		}
	}
}

// checkMemoryLimit checks that GOMEMLIMIT, when set, leaves the container
// headroom under its memory limit for what the Go heap limit does not
// count (stacks, the runtime, the binary): at most 90% of it.
func checkMemoryLimit(t *testing.T, where string, c k8sContainer) {
	t.Helper()
	limit, err := quantityBytes(c.Resources.Limits["memory"])
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		if e.ValueFrom != nil {
			t.Errorf("%s: GOMEMLIMIT from valueFrom is the whole memory limit (or, with a divisor, a number of bytes): set a value with headroom, such as 90%% of it", where)
			continue
		}
		// Go spells its limit 230MiB, Kubernetes 230Mi.
		got, gerr := quantityBytes(strings.TrimSuffix(e.Value, "B"))
		if gerr != nil || err != nil || got > limit*9/10 {
			t.Errorf("%s: GOMEMLIMIT=%s, want at most 90%% of the memory limit %s", where, e.Value, c.Resources.Limits["memory"])
		}
	}
}
