package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// A client holds what the workers of a run share to reach the service.
type client interface {
	// session returns the per-worker state for one worker; sessions are not
	// safe for concurrent use.
	session(keys *keyPicker) session
	// close releases the client's connections.
	close() error
}

// A session sends one request at a time for one worker.
type session interface {
	// call sends one request for the next key and reports whether the
	// service allowed it, giving up after the Config's Timeout or when
	// ctx ends. A denial is a result, not an error.
	call(ctx context.Context) (outcome, error)
}

// newClient returns the client for cfg.Target; cfg has its defaults applied.
func newClient(cfg *Config) (client, error) {
	switch cfg.Target {
	case HTTP:
		return newHTTPClient(cfg)
	case GRPC:
		if cfg.GRPCClient == GoClient {
			return newGRPCClient(cfg)
		}
		return newWireClient(cfg), nil
	}
	return nil, fmt.Errorf("loadgen: unknown target %q", cfg.Target)
}

// maxResponse caps the HTTP response bodies read.
const maxResponse = 1 << 20

// httpClient posts to floodgate's /v1/check.
type httpClient struct {
	url            string
	prefix, suffix []byte // the request body around the key value
	hc             *http.Client
	tr             *http.Transport
	timeout        time.Duration
}

func newHTTPClient(cfg *Config) (*httpClient, error) {
	base := cfg.Addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	limiter, err := json.Marshal(cfg.Limiter)
	if err != nil {
		return nil, err
	}
	attr, err := json.Marshal(cfg.Attribute)
	if err != nil {
		return nil, err
	}
	prefix, err := json.Marshal(cfg.KeyPrefix)
	if err != nil {
		return nil, err
	}
	// The key value is the JSON-escaped prefix followed by digits, which
	// need no escaping: splice it between the two halves of the body.
	head := fmt.Sprintf(`{"limiter":%s,"attributes":{%s:%s`, limiter, attr, prefix[:len(prefix)-1])
	tail := fmt.Sprintf(`"},"cost":%d}`, cfg.Cost)
	conns := max(cfg.Concurrency, 1)
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.Timeout}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &httpClient{
		url:     strings.TrimRight(base, "/") + "/v1/check",
		prefix:  []byte(head),
		suffix:  []byte(tail),
		hc:      &http.Client{Transport: tr},
		tr:      tr,
		timeout: cfg.Timeout,
	}, nil
}

func (c *httpClient) session(keys *keyPicker) session {
	return &httpSession{c: c, keys: keys}
}

func (c *httpClient) close() error {
	c.tr.CloseIdleConnections()
	return nil
}

type httpSession struct {
	c    *httpClient
	keys *keyPicker
	body []byte
	resp bytes.Buffer
}

// checkResponse is the part of a /v1/check answer the generator reads.
type checkResponse struct {
	Allowed *bool  `json:"allowed"`
	Reason  string `json:"reason"`
}

func (s *httpSession) call(ctx context.Context) (outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, s.c.timeout)
	defer cancel()
	b := append(s.body[:0], s.c.prefix...) // ends with the key prefix
	b = s.keys.appendNumber(b)
	b = append(b, s.c.suffix...)
	s.body = b
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.c.url, bytes.NewReader(b))
	if err != nil {
		return outDenied, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := s.c.hc.Do(req)
	if err != nil {
		return outDenied, shortenHTTPError(err)
	}
	s.resp.Reset()
	_, err = s.resp.ReadFrom(io.LimitReader(res.Body, maxResponse))
	res.Body.Close()
	if err != nil {
		return outDenied, fmt.Errorf("reading response: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return outDenied, fmt.Errorf("HTTP %d: %s", res.StatusCode, firstLine(s.resp.Bytes(), 120))
	}
	var cr checkResponse
	if err := json.Unmarshal(s.resp.Bytes(), &cr); err != nil {
		return outDenied, fmt.Errorf("decoding response: %w", err)
	}
	if cr.Allowed == nil {
		return outDenied, fmt.Errorf("response has no \"allowed\" field: %s", firstLine(s.resp.Bytes(), 120))
	}
	if cr.Reason == "store" { // decided by the failure policy
		if *cr.Allowed {
			return outFailOpen, nil
		}
		return outFailClosed, nil
	}
	return decided(*cr.Allowed), nil
}

// shortenHTTPError drops the method and URL that net/http wraps around every
// error, so that the same failure always has the same text.
func shortenHTTPError(err error) error {
	if ue, ok := err.(interface{ Unwrap() error }); ok {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// firstLine returns the start of b's first line, at most n bytes.
func firstLine(b []byte, n int) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// grpcClient calls Envoy's RateLimitService over a few shared connections
// with grpc-go's client (Config.GRPCClient GoClient).
type grpcClient struct {
	cfg   *Config
	conns []*grpc.ClientConn
	next  int // round-robin over conns when sessions are created
}

func newGRPCClient(cfg *Config) (*grpcClient, error) {
	c := &grpcClient{cfg: cfg}
	for range max(cfg.Conns, 1) {
		cc, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("loadgen: dialing %s: %w", cfg.Addr, err)
		}
		c.conns = append(c.conns, cc)
	}
	return c, nil
}

func (c *grpcClient) session(keys *keyPicker) session {
	cc := c.conns[c.next%len(c.conns)]
	c.next++
	s := &grpcSession{
		rls:     rlsv3.NewRateLimitServiceClient(cc),
		keys:    keys,
		timeout: c.cfg.Timeout,
		req:     &rlsv3.RateLimitRequest{Domain: c.cfg.Domain, HitsAddend: uint32(c.cfg.Cost)},
	}
	for _, key := range entryKeys(c.cfg) {
		entry := &ratelimitv3.RateLimitDescriptor_Entry{Key: key}
		s.entries = append(s.entries, entry)
		s.req.Descriptors = append(s.req.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry}})
	}
	return s
}

// entryKeys are the entry keys of cfg's descriptors.
func entryKeys(cfg *Config) []string {
	keys := make([]string, max(cfg.Descriptors, 1))
	for i := range keys {
		keys[i] = descriptorKey(cfg.Attribute, i)
	}
	return keys
}

// descriptorKey is the entry key of a request's i-th descriptor (from 0):
// attr, then attr2, attr3, ...
func descriptorKey(attr string, i int) string {
	if i == 0 {
		return attr
	}
	return attr + strconv.Itoa(i+1)
}

func (c *grpcClient) close() error {
	var first error
	for _, cc := range c.conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

type grpcSession struct {
	rls     rlsv3.RateLimitServiceClient
	keys    *keyPicker
	entries []*ratelimitv3.RateLimitDescriptor_Entry // one per descriptor
	req     *rlsv3.RateLimitRequest                  // reused: a call finishes with it before returning

	timeout time.Duration
}

func (s *grpcSession) call(ctx context.Context) (outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v := s.keys.nextString()
	for _, e := range s.entries {
		e.Value = v
	}
	res, err := s.rls.ShouldRateLimit(ctx, s.req)
	if err != nil {
		st := status.Convert(err)
		return outDenied, fmt.Errorf("gRPC %v: %s", st.Code(), st.Message())
	}
	switch res.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		return outAllowed, nil
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return outDenied, nil
	}
	return outDenied, fmt.Errorf("unexpected overall_code %v", res.GetOverallCode())
}
