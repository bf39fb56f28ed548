package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/server"
)

// deploy sets srv up as the configuration's deployment sections say:
// Envoy domains over xDS (envoy.xds), the gRPC listener's TLS (grpc.tls)
// and traces (tracing). The returned function flushes the traces; call it
// once the server is closed.
func deploy(ctx context.Context, c *config.Config, srv *server.Server, getenv func(string) string, logger *slog.Logger) (func(), error) {
	if x := c.EnvoyXDS; x != nil {
		if srv.EnvoyConfigDir != "" {
			return nil, errors.New("envoy.xds and --envoy-config-dir both name where the Envoy domains come from: keep one")
		}
		srv.EnvoyXDS = &server.EnvoyXDS{Server: x.Server, NodeID: x.NodeID, NodeMetadata: x.NodeMetadata,
			StartWithoutConfig: x.StartWithoutConfig, RetryInitial: x.RetryInitial, RetryMax: x.RetryMax}
		if t := x.TLS; t != nil {
			srv.EnvoyXDS.TLS = &server.ClientTLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
		}
	}
	if t := c.GRPCTLS; t != nil {
		srv.GRPCTLS = &server.ListenerTLS{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile, ClientSAN: t.ClientSAN}
	}
	t := c.Tracing
	if t == nil {
		return func() {}, nil
	}
	tp, err := newTracerProvider(ctx, &tracing{protocol: t.Protocol, samplingRate: t.SamplingRate, serviceName: t.ServiceName,
		serviceNamespace: t.ServiceNamespace, serviceInstanceID: t.ServiceInstanceID, defaultName: "floodgate"}, getenv, logger)
	if err != nil || tp == nil {
		return func() {}, err
	}
	srv.TracerProvider = tp
	return func() { shutdownTracing(tp, logger) }, nil
}
