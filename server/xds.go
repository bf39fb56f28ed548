package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-go/floodgate/envoy"
)

// Defaults of EnvoyXDS.
const (
	DefaultXDSNodeID       = "default"
	DefaultXDSRetryInitial = time.Second
	DefaultXDSRetryMax     = time.Minute
)

// xdsRejectPause is how long the client waits before it refuses, again, a
// push it has refused already: a management server that sends a refused
// version back at once (as go-control-plane's caches do) is then asked
// once a second, not in a loop.
const xdsRejectPause = time.Second

// EnvoyXDS receives the Envoy domains from an xDS management server, as
// Envoy Gateway configures the reference rate limit service: State of the
// World over the aggregated discovery stream (StreamAggregatedResources),
// subscribed to every envoy.ResourceType resource, one per domain. Each push
// is checked as a directory of files is (envoy.LoadResources): a valid one
// replaces the domains at once and is acknowledged; an invalid one is
// refused (NACK, with the error), reported as a failed reload is, and the
// last good domains keep serving. They keep serving while the server is
// unreachable; the client reconnects with exponential backoff.
type EnvoyXDS struct {
	// Server is the management server's address: host:port, or a gRPC
	// target such as dns:///host:port.
	Server string
	// NodeID identifies the service to the management server, which
	// keeps a configuration per node (Envoy Gateway: envoy-ratelimit).
	// "" means DefaultXDSNodeID, as in the reference service.
	NodeID string
	// NodeMetadata is sent as the node's metadata.
	NodeMetadata map[string]string
	// Headers are added to the stream's gRPC metadata.
	Headers map[string]string
	// TLS, when set, connects over TLS (with a client certificate when it
	// names one); nil connects in plain text.
	TLS *ClientTLS
	// StartWithoutConfig makes the service healthy and ready before the
	// first push arrives (the reference's
	// FORCE_START_WITHOUT_INITIAL_CONFIG). Without it, GET /healthcheck
	// and /readyz fail and gRPC health reports NOT_SERVING until then.
	// Either way, until then ShouldRateLimit answers as the reference
	// service does before any configuration: an error (codes.Unknown, "no
	// rate limit configuration loaded"), except for domains that a
	// limiter of the YAML configuration serves.
	StartWithoutConfig bool
	// RetryInitial and RetryMax bound the wait before reconnecting: it
	// starts at RetryInitial and doubles up to RetryMax, each wait drawn
	// between its half and itself. 0 means DefaultXDSRetryInitial and
	// DefaultXDSRetryMax.
	RetryInitial time.Duration
	RetryMax     time.Duration
	// MaxMessageBytes caps the size of a push; 0 means gRPC's default,
	// 4 MiB.
	MaxMessageBytes int
}

// errNoConfig is ShouldRateLimit's answer until the first push, the
// reference service's.
const errNoConfig = "no rate limit configuration loaded"

// xdsClient is the running EnvoyXDS.
type xdsClient struct {
	s     *Server
	cfg   EnvoyXDS
	node  *corev3.Node
	creds grpc.DialOption

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	loaded    atomic.Bool // a push has been applied
	connected prometheus.Gauge

	mu       sync.Mutex // guards the fields below
	state    xdsState
	rejected string // the version last refused, so that a repeat is reported once
}

// xdsState is what /readyz says of the xDS client.
type xdsState struct {
	Server    string `json:"server"`
	NodeID    string `json:"node_id"`
	Connected bool   `json:"connected"`
	// Version is the version of the configuration in use; "" before the
	// first push.
	Version string `json:"version,omitempty"`
	// LastError is why the connection or the last push failed.
	LastError string `json:"last_error,omitempty"`
}

// openXDS checks EnvoyXDS and builds its client; startXDS starts it.
func (s *Server) openXDS() error {
	x := *s.EnvoyXDS
	if s.EnvoyConfigDir != "" {
		return errors.New("server: EnvoyConfigDir and EnvoyXDS are both set: the Envoy domains come from one of them")
	}
	if x.Server == "" {
		return errors.New("server: EnvoyXDS.Server is required")
	}
	if x.NodeID == "" {
		x.NodeID = DefaultXDSNodeID
	}
	if x.RetryInitial <= 0 {
		x.RetryInitial = DefaultXDSRetryInitial
	}
	if x.RetryMax <= 0 {
		x.RetryMax = DefaultXDSRetryMax
	}
	x.RetryMax = max(x.RetryMax, x.RetryInitial)
	c := &xdsClient{s: s, cfg: x, done: make(chan struct{})}
	c.creds = grpc.WithTransportCredentials(insecure.NewCredentials())
	if t := x.TLS; t != nil {
		files, err := loadCertFiles("xDS client", t.CertFile, t.KeyFile, t.CAFile, s.Logger)
		if err != nil {
			return fmt.Errorf("server: %w", err)
		}
		c.creds = grpc.WithTransportCredentials(newClientCredentials(files, t.ServerName))
	}
	md := make(map[string]any, len(x.NodeMetadata))
	for k, v := range x.NodeMetadata {
		md[k] = v
	}
	meta, err := structpb.NewStruct(md)
	if err != nil {
		return fmt.Errorf("server: EnvoyXDS.NodeMetadata: %w", err)
	}
	c.node = &corev3.Node{Id: x.NodeID, Metadata: meta, UserAgentName: "floodgate"}
	c.state = xdsState{Server: x.Server, NodeID: x.NodeID}
	c.connected = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_xds_connected",
		Help: "1 while the stream to the xDS management server that configures the Envoy domains is up, else 0.",
	})
	if err := s.Registerer.Register(c.connected); err != nil {
		return err
	}
	s.xds = c
	return nil
}

// startXDS starts the xDS client, if any; Open calls it once the
// listeners are up.
func (s *Server) startXDS() {
	c := s.xds
	if c == nil {
		return
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if !c.ready() {
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		s.health.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_NOT_SERVING)
	}
	s.Logger.Info("xDS: subscribing to the Envoy rate limit configuration", "server", c.cfg.Server, "node_id", c.cfg.NodeID,
		"tls", c.cfg.TLS != nil, "start_without_config", c.cfg.StartWithoutConfig)
	go c.run()
}

// stopXDS stops the xDS client and waits for it; Close calls it.
func (s *Server) stopXDS() {
	if c := s.xds; c != nil && c.cancel != nil {
		c.cancel()
		<-c.done
	}
}

// ready reports whether the service may be reported healthy: after the
// first push, or from the start with StartWithoutConfig.
func (c *xdsClient) ready() bool { return c.cfg.StartWithoutConfig || c.loaded.Load() }

// snapshot returns the client's state for /readyz.
func (c *xdsClient) snapshot() *xdsState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state
	return &st
}

func (c *xdsClient) setState(f func(*xdsState)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.state)
}

// run keeps a stream open until the client stops, waiting between
// attempts: from RetryInitial, doubling to RetryMax, back to RetryInitial
// after a stream that delivered a push.
func (c *xdsClient) run() {
	defer close(c.done)
	attempt := 0
	for {
		got, err := c.stream()
		if c.ctx.Err() != nil {
			return
		}
		c.connected.Set(0)
		c.setState(func(st *xdsState) { st.Connected, st.LastError = false, err.Error() })
		if got {
			attempt = 0
		}
		wait := c.backoff(attempt)
		attempt++
		c.s.Logger.Warn("xDS: no stream to the management server; the last configuration keeps serving",
			"server", c.cfg.Server, "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// backoff is the wait before attempt n (from 0): RetryInitial·2ⁿ capped
// at RetryMax, drawn between its half and itself.
func (c *xdsClient) backoff(n int) time.Duration {
	d := c.cfg.RetryMax
	if n < 32 {
		d = min(c.cfg.RetryInitial<<n, c.cfg.RetryMax)
	}
	return d/2 + rand.N(d/2+1)
}

// stream connects, subscribes and applies pushes until the stream fails.
// It reports whether a push arrived.
func (c *xdsClient) stream() (got bool, err error) {
	opts := []grpc.DialOption{c.creds}
	if c.cfg.MaxMessageBytes > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.cfg.MaxMessageBytes)))
	}
	// A connection of its own per attempt: the waits between attempts
	// are run's alone, and each attempt resolves the name afresh.
	conn, err := grpc.NewClient(c.cfg.Server, opts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	if len(c.cfg.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.cfg.Headers))
	}
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	// The version in use, so that a server that has no newer one need
	// not send it again.
	version := c.snapshot().Version
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: envoy.ResourceType, VersionInfo: version}); err != nil {
		return false, err
	}
	c.connected.Set(1)
	c.setState(func(st *xdsState) { st.Connected, st.LastError = true, "" })
	c.s.Logger.Info("xDS: subscribed", "server", c.cfg.Server, "node_id", c.cfg.NodeID, "version", version)
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, err
		}
		got = true
		req := &discoveryv3.DiscoveryRequest{TypeUrl: envoy.ResourceType, ResponseNonce: resp.GetNonce()}
		if err := c.apply(resp); err != nil {
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		}
		req.VersionInfo = c.snapshot().Version
		if err := st.Send(req); err != nil {
			return got, err
		}
	}
}

// apply makes resp's domains the Envoy service's, or reports why not.
func (c *xdsClient) apply(resp *discoveryv3.DiscoveryResponse) error {
	s, version := c.s, resp.GetVersionInfo()
	var err error
	var cfg *envoy.Config
	if resp.GetTypeUrl() != envoy.ResourceType {
		err = fmt.Errorf("xDS: a push of type %q, want %s", resp.GetTypeUrl(), envoy.ResourceType)
	} else {
		cfg, err = envoy.LoadResources(resp.GetResources())
	}
	s.reloadMu.Lock()
	if err == nil {
		var opts *envoyOptions
		if opts, err = s.envoyOptions(s.limiters.Load().config); err == nil {
			if err = s.envoy.Update(cfg, &opts.Options); err == nil {
				s.envoyOn.Store(opts.chain)
			}
		}
	}
	now := time.Now()
	if err != nil {
		c.mu.Lock()
		repeat := c.rejected == version
		c.rejected = version
		c.state.LastError = err.Error()
		c.mu.Unlock()
		if !repeat {
			prev := s.state.Load()
			s.state.Store(&reloadState{loadedAt: prev.loadedAt, err: err, failedAt: now})
			s.metrics.reloadFailed()
			s.Logger.Error("xDS: push refused; the previous configuration keeps serving",
				"version", version, "resources", len(resp.GetResources()), "err", err)
		}
		s.reloadMu.Unlock()
		if repeat {
			// Sent back unchanged: refuse it again, but not in a loop.
			select {
			case <-c.ctx.Done():
			case <-time.After(xdsRejectPause):
			}
		}
		return err
	}
	s.state.Store(&reloadState{loadedAt: now})
	s.metrics.reloadOK(now)
	s.live.retain(s.observed())
	first := !c.loaded.Swap(true)
	c.mu.Lock()
	c.state.Version, c.state.LastError, c.rejected = version, "", ""
	c.mu.Unlock()
	if first && !c.cfg.StartWithoutConfig {
		select {
		case <-s.done: // closing: health stays NOT_SERVING
		default:
			s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			s.health.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING)
		}
	}
	s.reloadMu.Unlock()
	s.Logger.Info("xDS: configuration applied", "version", version, "domains", strings.Join(cfg.Domains(), ","))
	return nil
}
