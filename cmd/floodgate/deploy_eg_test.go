package main

import (
	"path/filepath"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

const egExample = deployDir + "/kubernetes/envoy-gateway"

// The Envoy Gateway example changes the rate limit Deployment's image and
// nothing else of it; the environment Envoy Gateway then gives floodgate
// is TestEnvoyGatewayEnvironment's.
func TestEnvoyGatewayExample(t *testing.T) {
	objs := readObjects(t, filepath.Join(egExample, "envoy-gateway-config.yaml"))
	if len(objs) != 1 || objs[0].Kind != "ConfigMap" || objs[0].Metadata.Name != "envoy-gateway-config" {
		t.Fatalf("want the ConfigMap envoy-gateway-config, got %+v", objs)
	}
	var cm struct {
		Metadata struct {
			Namespace string `yaml:"namespace"`
		} `yaml:"metadata"`
		Data map[string]string `yaml:"data"`
	}
	objs[0].as(t, &cm)
	if cm.Metadata.Namespace != "envoy-gateway-system" {
		t.Errorf("namespace %q, want envoy-gateway-system", cm.Metadata.Namespace)
	}
	var eg struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Provider   struct {
			Type       string `yaml:"type"`
			Kubernetes struct {
				RateLimitDeployment map[string]any `yaml:"rateLimitDeployment"`
			} `yaml:"kubernetes"`
		} `yaml:"provider"`
		RateLimit struct {
			Backend struct {
				Type  string `yaml:"type"`
				Redis struct {
					URL string `yaml:"url"`
				} `yaml:"redis"`
			} `yaml:"backend"`
		} `yaml:"rateLimit"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["envoy-gateway.yaml"]), &eg); err != nil {
		t.Fatal(err)
	}
	if eg.APIVersion != "gateway.envoyproxy.io/v1alpha1" || eg.Kind != "EnvoyGateway" || eg.Provider.Type != "Kubernetes" {
		t.Errorf("not an EnvoyGateway on Kubernetes: %s %s %s", eg.APIVersion, eg.Kind, eg.Provider.Type)
	}
	want := map[string]any{"container": map[string]any{"image": "floodgate"}}
	if got := eg.Provider.Kubernetes.RateLimitDeployment; !reflect.DeepEqual(got, want) {
		t.Errorf("rateLimitDeployment = %v, want the image alone: %v", got, want)
	}
	if eg.RateLimit.Backend.Type != "Redis" || eg.RateLimit.Backend.Redis.URL == "" {
		t.Errorf("rateLimit.backend: %+v", eg.RateLimit.Backend)
	}
	policy := readObjects(t, filepath.Join(egExample, "backend-traffic-policy.yaml"))
	if len(policy) != 1 || policy[0].Kind != "BackendTrafficPolicy" || policy[0].APIVersion != "gateway.envoyproxy.io/v1alpha1" {
		t.Errorf("want one BackendTrafficPolicy, got %+v", policy)
	}
}
