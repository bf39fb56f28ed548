package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// The deployment sections: an xDS source makes limiters optional; the
// gRPC listener's TLS and tracing are read as written.
func TestDeploySections(t *testing.T) {
	c, err := Parse("eg.yaml", []byte(`
store:
  redis: {url: "redis://127.0.0.1:6379"}
envoy:
  xds:
    server: envoy-gateway:18001
    node_id: envoy-ratelimit
    node_metadata: {cluster: eg}
    tls: {ca_file: /certs/ca.crt, cert_file: /certs/tls.crt, key_file: /certs/tls.key, server_name: envoy-gateway}
    start_without_config: true
    retry: {initial: 2s, max: 30s}
grpc:
  tls: {cert_file: /certs/tls.crt, key_file: /certs/tls.key, client_ca_file: /certs/ca.crt}
tracing:
  protocol: grpc
  sampling_rate: 0.25
  service_name: envoy-ratelimit
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &XDS{Server: "envoy-gateway:18001", NodeID: "envoy-ratelimit", NodeMetadata: map[string]string{"cluster": "eg"},
		TLS:                &ClientTLS{CAFile: "/certs/ca.crt", CertFile: "/certs/tls.crt", KeyFile: "/certs/tls.key", ServerName: "envoy-gateway"},
		StartWithoutConfig: true, RetryInitial: 2 * time.Second, RetryMax: 30 * time.Second}
	if !reflect.DeepEqual(c.EnvoyXDS, want) {
		t.Errorf("envoy.xds = %+v, want %+v", c.EnvoyXDS, want)
	}
	if g := c.GRPCTLS; g == nil || *g != (ListenerTLS{CertFile: "/certs/tls.crt", KeyFile: "/certs/tls.key", ClientCAFile: "/certs/ca.crt"}) {
		t.Errorf("grpc.tls = %+v", g)
	}
	if tr := c.Tracing; tr == nil || tr.Protocol != "grpc" || tr.SamplingRate == nil || *tr.SamplingRate != 0.25 || tr.ServiceName != "envoy-ratelimit" {
		t.Errorf("tracing = %+v", tr)
	}
	if c, err := Parse("on.yaml", []byte("tracing: {}\nlimiters: [{name: a, rules: [{name: r, key: [k], algorithm: gcra, limit: 1, window: 1s}]}]\n")); err != nil || c.Tracing == nil {
		t.Errorf("tracing: {} does not turn tracing on: %+v %v", c, err)
	}
}

func TestDeploySectionErrors(t *testing.T) {
	_, err := Parse("bad.yaml", []byte(`envoy:
  xds:
    node_id: x
    tls: {cert_file: /c.crt}
    retry: {initial: 5s, max: 1s}
grpc:
  tls: {cert_file: /c.crt, client_san: envoy}
tracing: {protocol: udp, sampling_rate: 2}
`))
	for _, want := range []string{
		"bad.yaml:2:3: envoy.xds.server: must name the management server (host:port)",
		"bad.yaml:4:10: envoy.xds.tls: cert_file and key_file go together: set both or neither",
		"bad.yaml:5:12: envoy.xds.retry.max: must not be shorter than initial (5s), got 1s",
		"bad.yaml:7:8: grpc.tls: cert_file and key_file are both required",
		"bad.yaml:7:40: grpc.tls.client_san: needs client_ca_file: without it, clients are not asked for certificates",
		`bad.yaml:8:21: tracing.protocol: must be http or grpc, got "udp"`,
		`bad.yaml:8:41: tracing.sampling_rate: must be a number from 0 to 1, got "2"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in:\n%v", want, err)
		}
	}
}
