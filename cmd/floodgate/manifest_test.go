package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The parts of Kubernetes objects and kustomizations that the deploy tests
// read (deploy/kubernetes). Unknown fields are ignored here: kubectl checks
// the schema, these tests check the manifests against the binary.

type objectMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type k8sObject struct {
	File       string
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	node       *yaml.Node
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type k8sDeployment struct {
	Spec struct {
		Replicas int           `yaml:"replicas"`
		Selector labelSelector `yaml:"selector"`
		Template struct {
			Metadata objectMeta `yaml:"metadata"`
			Spec     k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sPodSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
		RunAsUser    int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []k8sContainer `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type k8sContainer struct {
	Name           string    `yaml:"name"`
	Image          string    `yaml:"image"`
	Command        []string  `yaml:"command"`
	Args           []string  `yaml:"args"`
	Env            []k8sEnv  `yaml:"env"`
	Ports          []k8sPort `yaml:"ports"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	Resources      struct {
		Limits map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type k8sEnv struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
		ResourceFieldRef *struct {
			Resource string `yaml:"resource"`
		} `yaml:"resourceFieldRef"`
	} `yaml:"valueFrom"`
}

type k8sPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
}

type k8sProbe struct {
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
	HTTPGet          *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"` // a number or a container port's name
	} `yaml:"httpGet"`
}

type k8sService struct {
	Spec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sPDB struct {
	Spec struct {
		MinAvailable *int          `yaml:"minAvailable"`
		Selector     labelSelector `yaml:"selector"`
	} `yaml:"spec"`
}

type k8sSecret struct {
	StringData map[string]string `yaml:"stringData"`
}

type kustomization struct {
	Namespace          string   `yaml:"namespace"`
	Resources          []string `yaml:"resources"`
	ConfigMapGenerator []struct {
		Name    string   `yaml:"name"`
		Files   []string `yaml:"files"`
		Options struct {
			DisableNameSuffixHash bool `yaml:"disableNameSuffixHash"`
		} `yaml:"options"`
	} `yaml:"configMapGenerator"`
	Images []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
}

// bundle is one kustomization: its objects and its generated ConfigMaps.
type bundle struct {
	dir        string
	kust       kustomization
	objects    []k8sObject
	configMaps map[string]map[string][]byte // name → file name → content
}

// loadBundle reads the kustomization in dir, its resources and the files of
// its ConfigMap generators.
func loadBundle(t *testing.T, dir string) *bundle {
	t.Helper()
	b := &bundle{dir: dir, configMaps: map[string]map[string][]byte{}}
	decodeFile(t, filepath.Join(dir, "kustomization.yaml"), &b.kust)
	for _, r := range b.kust.Resources {
		b.objects = append(b.objects, readObjects(t, filepath.Join(dir, r))...)
	}
	for _, g := range b.kust.ConfigMapGenerator {
		if !g.Options.DisableNameSuffixHash {
			t.Errorf("%s: configMapGenerator %s: set options.disableNameSuffixHash, or an edit becomes a new ConfigMap and a rollout instead of a hot reload", dir, g.Name)
		}
		files := map[string][]byte{}
		for _, f := range g.Files {
			data, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			files[filepath.Base(f)] = data
		}
		b.configMaps[g.Name] = files
	}
	return b
}

func decodeFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// readObjects reads every document of a multi-document YAML file.
func readObjects(t *testing.T, path string) []k8sObject {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		o := k8sObject{File: path, node: &n}
		if err := n.Decode(&o); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if o.Kind == "" || o.Metadata.Name == "" {
			t.Fatalf("%s:%d: an object without kind or metadata.name", path, n.Line)
		}
		objs = append(objs, o)
	}
	return objs
}

// as decodes the object into v (one of the types above).
func (o k8sObject) as(t *testing.T, v any) {
	t.Helper()
	if err := o.node.Decode(v); err != nil {
		t.Fatalf("%s: %s %s: %v", o.File, o.Kind, o.Metadata.Name, err)
	}
}

func (b *bundle) kind(kind string) []k8sObject {
	var out []k8sObject
	for _, o := range b.objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// secretValue returns a key of a Secret in the bundle.
func (b *bundle) secretValue(t *testing.T, name, key string) (string, bool) {
	for _, o := range b.kind("Secret") {
		if o.Metadata.Name == name {
			var s k8sSecret
			o.as(t, &s)
			v, ok := s.StringData[key]
			return v, ok
		}
	}
	return "", false
}

// matches reports whether every label of sel is in labels.
func matches(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// portNumber resolves a probe's or Service's port (a number or a container
// port's name) against a container's ports; 0 if it names none.
func (c k8sContainer) portNumber(p string) int {
	if n, err := strconv.Atoi(p); err == nil {
		for _, cp := range c.Ports {
			if cp.ContainerPort == n {
				return n
			}
		}
		return 0
	}
	for _, cp := range c.Ports {
		if cp.Name == p {
			return cp.ContainerPort
		}
	}
	return 0
}

func (c k8sContainer) env(name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// flagValue returns the value of --name (or -name) in args, in the --name=value
// or the --name value form.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// quantityBytes converts a Kubernetes memory quantity (256Mi, 1Gi, 1000000)
// into bytes, as a resourceFieldRef presents it.
func quantityBytes(q string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "k": 1e3, "M": 1e6, "G": 1e9} {
		if n, ok := strings.CutSuffix(q, suffix); ok {
			q, mult = n, m
			break
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	return n * mult, err
}
