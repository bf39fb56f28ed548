package config

import (
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate/internal/yamlnode"
	"go.yaml.in/yaml/v3"
)

// The sections of how the service is deployed: where its Envoy domains
// come from (envoy.xds), the gRPC listener's TLS (grpc.tls) and traces
// (tracing). They are read when the service starts; a reload that changes
// them is applied except for them, and logged.

// XDS is envoy.xds: the Envoy domains come from an xDS management
// server, as Envoy Gateway configures its rate limit service.
type XDS struct {
	// Server is the management server's address (host:port); required.
	Server string
	// NodeID identifies the service to the server; "" means "default".
	NodeID string
	// NodeMetadata is sent as the node's metadata.
	NodeMetadata map[string]string
	// TLS, when set, connects over TLS; nil is plain text.
	TLS *ClientTLS
	// StartWithoutConfig makes the service ready before the first push.
	StartWithoutConfig bool
	// RetryInitial and RetryMax bound the wait before reconnecting; 0
	// means the server's defaults (1s, 1m).
	RetryInitial time.Duration
	RetryMax     time.Duration
}

// ClientTLS is a client's TLS, from files read again when they change.
type ClientTLS struct {
	// CAFile verifies the server; "" means the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate (mutual TLS).
	CertFile string
	KeyFile  string
	// ServerName is the name the server's certificate must hold, when it
	// is not the host dialled.
	ServerName string
}

// ListenerTLS is grpc.tls: the gRPC listener's own TLS, from files read
// again when they change.
type ListenerTLS struct {
	// CertFile and KeyFile are the server's certificate and key; required.
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, makes client certificates required and
	// verified against it.
	ClientCAFile string
	// ClientSAN, when set, is a DNS name client certificates must hold.
	ClientSAN string
}

// Tracing is tracing: OpenTelemetry traces over OTLP, to the endpoint of
// the standard OTEL_EXPORTER_OTLP_* variables.
type Tracing struct {
	// Protocol is "http" (OTLP/HTTP protobuf) or "grpc"; "" leaves it to
	// OTEL_EXPORTER_OTLP_PROTOCOL, else http.
	Protocol string
	// SamplingRate, when set, is the share of new traces sampled; nil
	// leaves it to OTEL_TRACES_SAMPLER, else every trace.
	SamplingRate *float64
	// ServiceName, ServiceNamespace and ServiceInstanceID set the
	// resource's service.name (default "floodgate"), service.namespace
	// and service.instance.id over OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES.
	ServiceName       string
	ServiceNamespace  string
	ServiceInstanceID string
}

// envoySection decodes envoy: its xds.
func (d *decoder) envoySection(n *yaml.Node, c *Config) {
	f := d.mapping(n, "envoy", "xds")
	if f == nil || f["xds"] == nil {
		return
	}
	const path = "envoy.xds"
	x := d.mapping(f["xds"], path, "server", "node_id", "node_metadata", "tls", "start_without_config", "retry")
	if x == nil {
		return
	}
	out := &XDS{}
	if v := x["server"]; v != nil {
		out.Server, _ = d.str(v, path+".server")
	}
	if out.Server == "" {
		d.errorf(d.at(path+".server", n), path+".server", "must name the management server (host:port)")
	}
	if v := x["node_id"]; v != nil {
		out.NodeID, _ = d.str(v, path+".node_id")
	}
	if v := x["node_metadata"]; v != nil {
		if m := d.mapping(v, path+".node_metadata"); m != nil {
			out.NodeMetadata = make(map[string]string, len(m))
			for k, val := range m {
				out.NodeMetadata[k], _ = d.str(val, yamlnode.Join(path+".node_metadata", k))
			}
		}
	}
	if v := x["tls"]; v != nil {
		t := d.mapping(v, path+".tls", "ca_file", "cert_file", "key_file", "server_name")
		if t != nil {
			out.TLS = &ClientTLS{}
			d.strField(t, path+".tls", "ca_file", &out.TLS.CAFile)
			d.strField(t, path+".tls", "cert_file", &out.TLS.CertFile)
			d.strField(t, path+".tls", "key_file", &out.TLS.KeyFile)
			d.strField(t, path+".tls", "server_name", &out.TLS.ServerName)
			if (out.TLS.CertFile == "") != (out.TLS.KeyFile == "") {
				d.errorf(v, path+".tls", "cert_file and key_file go together: set both or neither")
			}
		}
	}
	if v := x["start_without_config"]; v != nil {
		out.StartWithoutConfig, _ = d.boolean(v, path+".start_without_config")
	}
	if v := x["retry"]; v != nil {
		if r := d.mapping(v, path+".retry", "initial", "max"); r != nil {
			if w := r["initial"]; w != nil {
				out.RetryInitial, _ = d.positive(w, path+".retry.initial")
			}
			if w := r["max"]; w != nil {
				out.RetryMax, _ = d.positive(w, path+".retry.max")
			}
			if out.RetryMax > 0 && out.RetryMax < out.RetryInitial {
				d.errorf(v, path+".retry.max", "must not be shorter than initial (%v), got %v", out.RetryInitial, out.RetryMax)
			}
		}
	}
	c.EnvoyXDS = out
}

// grpcSection decodes grpc: its tls.
func (d *decoder) grpcSection(n *yaml.Node, c *Config) {
	f := d.mapping(n, "grpc", "tls")
	if f == nil || f["tls"] == nil {
		return
	}
	const path = "grpc.tls"
	t := d.mapping(f["tls"], path, "cert_file", "key_file", "client_ca_file", "client_san")
	if t == nil {
		return
	}
	out := &ListenerTLS{}
	d.strField(t, path, "cert_file", &out.CertFile)
	d.strField(t, path, "key_file", &out.KeyFile)
	d.strField(t, path, "client_ca_file", &out.ClientCAFile)
	d.strField(t, path, "client_san", &out.ClientSAN)
	if out.CertFile == "" || out.KeyFile == "" {
		d.errorf(f["tls"], path, "cert_file and key_file are both required")
	}
	if out.ClientSAN != "" && out.ClientCAFile == "" {
		d.errorf(t["client_san"], path+".client_san", "needs client_ca_file: without it, clients are not asked for certificates")
	}
	c.GRPCTLS = out
}

// tracingSection decodes tracing.
func (d *decoder) tracingSection(n *yaml.Node, c *Config) {
	const path = "tracing"
	f := d.mapping(n, path, "protocol", "sampling_rate", "service_name", "service_namespace", "service_instance_id")
	if f == nil {
		return
	}
	out := &Tracing{}
	if v := f["protocol"]; v != nil {
		if p, ok := d.str(v, path+".protocol"); ok {
			switch p {
			case "http", "grpc":
				out.Protocol = p
			default:
				d.errorf(v, path+".protocol", "must be http or grpc, got %q", p)
			}
		}
	}
	if v := f["sampling_rate"]; v != nil {
		if s, ok := d.scalar(v, path+".sampling_rate"); ok {
			r, err := strconv.ParseFloat(s.Value, 64)
			if err != nil || (s.ShortTag() != "!!float" && s.ShortTag() != "!!int") || r < 0 || r > 1 {
				d.errorf(s, path+".sampling_rate", "must be a number from 0 to 1, got %s", yamlnode.Describe(s))
			} else {
				out.SamplingRate = &r
			}
		}
	}
	d.strField(f, path, "service_name", &out.ServiceName)
	d.strField(f, path, "service_namespace", &out.ServiceNamespace)
	d.strField(f, path, "service_instance_id", &out.ServiceInstanceID)
	c.Tracing = out
}

// strField decodes the string f[key], if present, into *dst.
func (d *decoder) strField(f map[string]*yaml.Node, path, key string, dst *string) {
	if v := f[key]; v != nil {
		*dst, _ = d.str(v, yamlnode.Join(path, key))
	}
}
