package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate/server"
)

// The reference service's variables of how it is deployed (by Envoy
// Gateway, for one): TLS on the gRPC listener, configuration over xDS,
// and traces.

// grpcTLS reads GRPC_SERVER_USE_TLS and the files it needs.
func (e *env) grpcTLS() *server.ListenerTLS {
	if !e.boolean("GRPC_SERVER_USE_TLS") {
		return nil
	}
	t := &server.ListenerTLS{CertFile: e.getenv("GRPC_SERVER_TLS_CERT"), KeyFile: e.getenv("GRPC_SERVER_TLS_KEY"), ClientSAN: e.getenv("GRPC_CLIENT_TLS_SAN")}
	if t.CertFile == "" || t.KeyFile == "" {
		e.errs = append(e.errs, "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	ca, egCA := e.getenv("GRPC_CLIENT_TLS_CACERT"), e.getenv("GRPC_SERVER_TLS_CA_CERT")
	if ca != "" && egCA != "" && ca != egCA {
		e.errs = append(e.errs, fmt.Sprintf("GRPC_CLIENT_TLS_CACERT=%s and GRPC_SERVER_TLS_CA_CERT=%s name two client CA files: set one", ca, egCA))
	}
	t.ClientCAFile = firstNonEmpty(ca, egCA)
	if t.ClientSAN != "" && t.ClientCAFile == "" {
		e.errs = append(e.errs, "GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT: without a CA, clients are not asked for certificates")
	}
	return t
}

// xds reads CONFIG_TYPE and, for GRPC_XDS_SOTW, the xDS client's
// variables; nil means the runtime directory.
func (e *env) xds() *server.EnvoyXDS {
	switch kind := e.str("CONFIG_TYPE"); strings.ToUpper(kind) {
	case "FILE":
		return nil
	case "GRPC_XDS_SOTW":
	default:
		e.errs = append(e.errs, fmt.Sprintf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", kind))
		return nil
	}
	x := &server.EnvoyXDS{
		Server:             e.str("CONFIG_GRPC_XDS_SERVER_URL"),
		NodeID:             e.str("CONFIG_GRPC_XDS_NODE_ID"),
		NodeMetadata:       e.pairs("CONFIG_GRPC_XDS_NODE_METADATA", "="),
		Headers:            e.pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ":"),
		StartWithoutConfig: e.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG"),
		RetryMax:           e.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL"),
	}
	if e.getenv("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL") != "" {
		x.RetryInitial = e.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")
	}
	if e.getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") != "" {
		x.MaxMessageBytes = e.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")
	}
	if e.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		x.TLS = &server.ClientTLS{
			CAFile:     e.getenv("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
			CertFile:   e.getenv("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
			KeyFile:    e.getenv("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
			ServerName: e.getenv("CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
		}
	}
	return x
}

// pairs reads a comma-separated list of key<sep>value pairs, skipping
// entries without sep, as the reference does.
func (e *env) pairs(name, sep string) map[string]string {
	out := map[string]string{}
	for _, entry := range strings.Split(e.getenv(name), ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(entry), sep); ok {
			out[k] = v
		}
	}
	return out
}

// tracing reads TRACING_*: nil while TRACING_ENABLED is not true. Unset
// variables leave the standard OTEL_* ones to decide, then the
// reference's defaults.
func (e *env) tracing() *tracing {
	if !e.boolean("TRACING_ENABLED") {
		return nil
	}
	t := &tracing{
		serviceName:       e.getenv("TRACING_SERVICE_NAME"),
		serviceNamespace:  e.getenv("TRACING_SERVICE_NAMESPACE"),
		serviceInstanceID: e.getenv("TRACING_SERVICE_INSTANCE_ID"),
		defaultName:       lookupEnvVar("TRACING_SERVICE_NAME").def,
	}
	if v := e.getenv("TRACING_EXPORTER_PROTOCOL"); v != "" {
		p, err := traceProtocol("TRACING_EXPORTER_PROTOCOL", v)
		if err != nil {
			e.errs = append(e.errs, err.Error())
		}
		t.protocol = p
	}
	if v := e.getenv("TRACING_SAMPLING_RATE"); v != "" {
		rate, err := strconv.ParseFloat(v, 64)
		if err != nil || rate < 0 {
			e.errs = append(e.errs, fmt.Sprintf("TRACING_SAMPLING_RATE=%q: want a number from 0 to 1", v))
		}
		t.samplingRate = &rate
	}
	return t
}
