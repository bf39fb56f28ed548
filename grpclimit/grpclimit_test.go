package grpclimit

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

var epoch = time.Unix(1_800_000_000, 0)

// serve starts a real gRPC server on a loopback port serving the health
// service (unary Check, streaming Watch) behind the interceptors, and
// returns a client.
func serve(t *testing.T, in *Interceptor) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func newLimiter(t *testing.T, rules []floodgate.Rule) (*floodgate.Limiter, *clocktest.Manual, *memory.Store) {
	t.Helper()
	clock := clocktest.New(epoch)
	store := memory.New(&memory.Options{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New("rpc", store, rules, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return lim, clock, store
}

func mustNew(t *testing.T, lim *floodgate.Limiter, opts *Options) *Interceptor {
	t.Helper()
	in, err := New(lim, opts)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.RetryDelay.AsDuration()
		}
	}
	t.Fatalf("no RetryInfo in %v", err)
	return 0
}

func TestUnaryDeniedWithRetryInfo(t *testing.T) {
	lim, clock, _ := newLimiter(t, []floodgate.Rule{
		{Name: "per-ip", Algorithm: floodgate.GCRA, Limit: 2, Window: 3 * time.Second, Key: []string{"ip"}},
	})
	client := serve(t, mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}}))
	ctx := context.Background()
	for i, want := range []string{`"per-ip";r=1;t=2`, `"per-ip";r=0;t=3`} {
		var hdr metadata.MD
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := strings.Join(hdr.Get(MetadataRateLimit), ""); got != want {
			t.Errorf("call %d: ratelimit = %q, want %q", i, got, want)
		}
		if got := strings.Join(hdr.Get(MetadataRateLimitPolicy), ""); got != `"per-ip";q=2;w=3` {
			t.Errorf("ratelimit-policy = %q", got)
		}
	}
	var hdr, trl metadata.MD
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if got := status.Code(err); got != codes.ResourceExhausted {
		t.Fatalf("code = %v, want ResourceExhausted", got)
	}
	wait := retryDelay(t, err)
	if wait != 1500*time.Millisecond {
		t.Errorf("RetryInfo delay = %v, want 1.5s", wait)
	}
	for _, md := range []metadata.MD{hdr, trl} {
		if got := strings.Join(md.Get(MetadataRetryAfter), ""); got != "2" {
			t.Errorf("retry-after = %q, want 2", got)
		}
		// A denying rule's t is when the call would be admitted: the
		// same instant as retry-after, not when the bucket is full (3s).
		if got := strings.Join(md.Get(MetadataRateLimit), ""); got != `"per-ip";r=0;t=2` {
			t.Errorf("ratelimit = %q", got)
		}
	}
	var violated []string
	for _, d := range status.Convert(err).Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok {
			for _, v := range qf.Violations {
				violated = append(violated, v.Subject)
			}
		}
	}
	if strings.Join(violated, ",") != "rpc/per-ip" {
		t.Errorf("QuotaFailure subjects = %v", violated)
	}
	clock.Advance(wait) // the exact delay is enough
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("retry after RetryInfo delay: %v", err)
	}
}

// Without quota metadata a denial still names every rule that denied, for
// a one-rule limiter (asked with Allow) and one of several (with Decide).
func TestOmitQuotaMetadataNamesViolatedRules(t *testing.T) {
	rule := func(name string, limit int64) floodgate.Rule {
		return floodgate.Rule{Name: name, Algorithm: floodgate.FixedWindow, Limit: limit, Window: time.Minute, Key: []string{"ip"}}
	}
	for _, tt := range []struct {
		name  string
		rules []floodgate.Rule
		want  string
	}{
		{"one rule", []floodgate.Rule{rule("per-ip", 1)}, "rpc/per-ip"},
		{"both deny", []floodgate.Rule{rule("a", 1), rule("b", 1)}, "rpc/a,rpc/b"},
		{"second denies", []floodgate.Rule{rule("a", 5), rule("b", 1)}, "rpc/b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim, _, _ := newLimiter(t, tt.rules)
			client := serve(t, mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}, OmitQuotaMetadata: true}))
			var hdr metadata.MD
			if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
				t.Fatal(err)
			}
			if got := hdr.Get(MetadataRateLimit); len(got) != 0 {
				t.Errorf("ratelimit metadata %q", got)
			}
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
			if status.Code(err) != codes.ResourceExhausted || retryDelay(t, err) != time.Minute {
				t.Fatalf("second call: %v", err)
			}
			if got := strings.Join(hdr.Get(MetadataRetryAfter), ""); got != "60" {
				t.Errorf("retry-after = %q", got)
			}
			var violated []string
			for _, d := range status.Convert(err).Details() {
				if qf, ok := d.(*errdetails.QuotaFailure); ok {
					for _, v := range qf.Violations {
						violated = append(violated, v.Subject)
					}
				}
			}
			if got := strings.Join(violated, ","); got != tt.want {
				t.Errorf("QuotaFailure subjects = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestStreamLimitedWhenOpened(t *testing.T) {
	lim, _, _ := newLimiter(t, []floodgate.Rule{
		{Name: "streams", Algorithm: floodgate.Concurrency, Limit: 1, Window: time.Minute, Key: []string{"ip"}},
	})
	client := serve(t, mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}}))
	ctx, cancel := context.WithCancel(context.Background())
	first, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	second, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	if got := status.Code(err); got != codes.ResourceExhausted {
		t.Fatalf("second concurrent stream: %v, want ResourceExhausted", err)
	}
	hdr, _ := second.Header()
	if got := strings.Join(hdr.Get(MetadataRateLimitPolicy), ""); got != `"streams";q=1;qu="concurrent-requests"` {
		t.Errorf("ratelimit-policy = %q", got)
	}
	cancel() // the first stream ends: its lease is released
	deadline := time.Now().Add(5 * time.Second)
	for {
		third, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if err == nil {
			if _, err = third.Recv(); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease never released: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // the server sees the cancellation asynchronously
	}
}

func TestMetadataKeys(t *testing.T) {
	lim, _, _ := newLimiter(t, []floodgate.Rule{
		{Name: "per-key", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute, Key: []string{"key", "method"}},
	})
	client := serve(t, mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"key": Metadata("x-api-key"), "method": Method()}}))
	call := func(key string) codes.Code {
		ctx := context.Background()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return status.Code(err)
	}
	if a, b, c := call("k1"), call("k2"), call("k1"); a != codes.OK || b != codes.OK || c != codes.ResourceExhausted {
		t.Errorf("k1, k2, k1 = %v, %v, %v", a, b, c)
	}
	if a, b := call(""), call(""); a != codes.OK || b != codes.OK {
		t.Errorf("no key (rule skipped) = %v, %v", a, b)
	}
}

// Forwarding metadata counts only from a trusted proxy, and IPv6 callers
// share their /64's bucket.
func TestPeerIPForwarded(t *testing.T) {
	lim, _, store := newLimiter(t, []floodgate.Rule{
		{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"ip"}},
	})
	call := func(client healthpb.HealthClient, xff string) codes.Code {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", xff)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return status.Code(err)
	}
	untrusted := clientip.MustNew(&clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	client := serve(t, mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(untrusted)}}))
	for i := range 50 {
		call(client, netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}).String())
	}
	if n := store.Len(); n != 1 {
		t.Errorf("spoofed metadata made %d keys, want 1", n)
	}

	lim2, _, store2 := newLimiter(t, []floodgate.Rule{
		{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"ip"}},
	})
	trusted := clientip.MustNew(&clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	client = serve(t, mustNew(t, lim2, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(trusted)}}))
	got := []codes.Code{call(client, "2001:db8:5:6::1"), call(client, "6.6.6.6, 2001:db8:5:6::2"), call(client, "2001:db8:5:6:ffff::3"), call(client, "2001:db8:5:7::1")}
	want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.OK}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: %v, want %v", i, got[i], want[i])
		}
	}
	if n := store2.Len(); n != 2 {
		t.Errorf("store holds %d keys, want 2 (/64 buckets)", n)
	}
}

type failingStore struct{}

func (failingStore) Apply(context.Context, *store.Batch) error { return errors.New("down") }

func TestStoreFailure(t *testing.T) {
	for _, tt := range []struct {
		policy floodgate.FailurePolicy
		want   codes.Code
	}{{floodgate.FailClosed, codes.Unavailable}, {floodgate.FailOpen, codes.OK}} {
		lim, err := floodgate.New("rpc", failingStore{}, []floodgate.Rule{
			{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute, Key: []string{"ip"}},
		}, &floodgate.Options{FailurePolicy: tt.policy, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		client := serve(t, mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}}))
		var hdr metadata.MD
		_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		if got := status.Code(err); got != tt.want {
			t.Errorf("%v: code %v, want %v", tt.policy, got, tt.want)
		}
		if len(hdr.Get(MetadataRateLimit)) != 0 {
			t.Errorf("%v: quota metadata on a store failure", tt.policy)
		}
		if tt.want == codes.Unavailable && retryDelay(t, err) < time.Second {
			t.Errorf("retry delay under 1s")
		}
	}
}

func TestNewErrors(t *testing.T) {
	lim, _, _ := newLimiter(t, []floodgate.Rule{
		{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute, Key: []string{"ip"}},
	})
	if _, err := New(nil, nil); err == nil {
		t.Error("nil limiter accepted")
	}
	if _, err := New(lim, nil); err == nil || !strings.Contains(err.Error(), `attribute "ip"`) {
		t.Errorf("missing attribute: %v", err)
	}
	if _, err := New(lim, &Options{Attributes: map[string]KeyFunc{"ip": nil}}); err == nil {
		t.Error("nil KeyFunc accepted")
	}
	if _, err := New(lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}, ChargeAfter: true, Count: CountFailures}); err == nil ||
		!strings.Contains(err.Error(), "ChargeAfter") {
		t.Errorf("ChargeAfter with Count: %v", err)
	}
}

// failingHealth fails Check for the service name "bad".
type failingHealth struct {
	healthpb.UnimplementedHealthServer
}

func (failingHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.Service == "bad" {
		return nil, status.Error(codes.PermissionDenied, "wrong credentials")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func TestCountFailuresOnly(t *testing.T) {
	lim, _, _ := newLimiter(t, []floodgate.Rule{
		{Name: "failures", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"ip"}},
	})
	in := mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}, Count: CountFailures})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()))
	healthpb.RegisterHealthServer(srv, failingHealth{})
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	call := func(service string) codes.Code {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		return status.Code(err)
	}
	for range 5 {
		if c := call("good"); c != codes.OK {
			t.Fatalf("good call: %v", c)
		}
	}
	if a, b := call("bad"), call("bad"); a != codes.PermissionDenied || b != codes.PermissionDenied {
		t.Fatalf("bad calls: %v %v", a, b)
	}
	if c := call("good"); c != codes.ResourceExhausted {
		t.Fatalf("after 2 failures: %v, want ResourceExhausted", c)
	}
}

// usageHealth reports, from Check and Watch, the usage its request's service
// name gives ("4" costs 4 units) with AddCost.
type usageHealth struct {
	healthpb.UnimplementedHealthServer
	outside chan bool // AddCost's answer, per call
}

func (h usageHealth) report(ctx context.Context, service string) {
	n, _ := strconv.ParseInt(service, 10, 64)
	h.outside <- AddCost(ctx, n)
}

func (h usageHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.report(ctx, req.Service)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h usageHealth) Watch(req *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	h.report(ss.Context(), req.Service)
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// TestChargeAfter admits calls while one unit is left and charges what the
// handlers reported when they return, for unary calls and streams alike; a
// call over the limit by then is refused.
func TestChargeAfter(t *testing.T) {
	lim, _, _ := newLimiter(t, []floodgate.Rule{
		{Name: "tokens", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"ip"}},
	})
	in := mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}, ChargeAfter: true})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := usageHealth{outside: make(chan bool, 8)}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	remaining := func() int64 {
		d, err := lim.Peek(ctx, floodgate.Attributes{"ip": "127.0.0.1"}, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}

	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "4"}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if !<-h.outside {
		t.Error("AddCost inside a ChargeAfter call reported no interceptor")
	}
	if got := remaining(); got != 6 {
		t.Errorf("remaining after a unary call that reported 4 = %d, want 6", got)
	}
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "5"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	<-h.outside
	for deadline := time.Now().Add(5 * time.Second); remaining() != 1; {
		if time.Now().After(deadline) { // the charge lands when the handler returns
			t.Fatalf("remaining after a stream that reported 5 = %d, want 1", remaining())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// One unit left: admitted, and its report of 7 pushes the key past the limit.
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "7"}); err != nil {
		t.Fatalf("call with one unit left: %v", err)
	}
	<-h.outside
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "1"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call after the limit was spent: %v, want ResourceExhausted", err)
	}
	if AddCost(ctx, 1) {
		t.Error("AddCost outside any interceptor reported one")
	}
}

// TestChargeAfterWithConcurrency: a call holds its in-flight lease while
// its handler runs, so an overlapping call is refused; when it returns the
// lease is released and its usage charged to the other rules alone.
func TestChargeAfterWithConcurrency(t *testing.T) {
	lim, _, _ := newLimiter(t, []floodgate.Rule{
		{Name: "in-flight", Algorithm: floodgate.Concurrency, Limit: 1, Window: time.Minute, Key: []string{"ip"}},
		{Name: "tokens", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute, Key: []string{"ip"}},
	})
	in := mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}, ChargeAfter: true})
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}})
	info := &grpc.UnaryServerInfo{FullMethod: "/llm.Complete"}
	call := func(h grpc.UnaryHandler) error {
		_, err := in.Unary()(ctx, nil, info, h)
		return err
	}
	var inner error
	err := call(func(hctx context.Context, _ any) (any, error) {
		inner = call(func(context.Context, any) (any, error) { return nil, nil })
		AddCost(hctx, 30)
		return nil, nil
	})
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	if status.Code(inner) != codes.ResourceExhausted {
		t.Fatalf("overlapping call: %v, want ResourceExhausted", inner)
	}
	o, err := lim.Decide(context.Background(), floodgate.ModePeek, floodgate.Attributes{"ip": "127.0.0.1"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range o.Rules {
		want := map[string]int64{"in-flight": 1, "tokens": 70}[r.Name]
		if r.Remaining != want {
			t.Errorf("after the call: %s has %d left, want %d (lease released, 30 tokens charged)", r.Name, r.Remaining, want)
		}
	}
	if err := call(func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Fatalf("next call: %v", err)
	}

	// The admitted call's metadata has the quota of the lease's rule too,
	// not only of the rules charged after the handler.
	client := serve(t, in)
	var hdr metadata.MD
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	pol := strings.Join(hdr.Get(MetadataRateLimitPolicy), ", ")
	if !strings.Contains(pol, `"tokens"`) || !strings.Contains(pol, `"in-flight"`) || len(hdr.Get(MetadataRateLimit)) != 2 {
		t.Errorf("ratelimit-policy %q, ratelimit %q: want both rules", pol, hdr.Get(MetadataRateLimit))
	}
}

// A limiter that requires every key refuses a call without one with
// codes.Internal, naming the rule: the server is set up wrong, the client
// did nothing wrong.
func TestMissingKeyIsInternal(t *testing.T) {
	st := memory.New(nil)
	t.Cleanup(func() { st.Close() })
	lim, err := floodgate.New("rpc", st, []floodgate.Rule{
		{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute, Key: []string{"tenant"}},
	}, &floodgate.Options{RequireKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"tenant": Metadata("x-tenant")}}))
	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "per-tenant") {
		t.Errorf("no x-tenant: %v, want Internal naming per-tenant", err)
	}
}
