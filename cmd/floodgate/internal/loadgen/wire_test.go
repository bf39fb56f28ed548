package loadgen

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// The wire client's hand-made request is what proto.Marshal writes.
func TestWireEncodingMatchesProto(t *testing.T) {
	for _, c := range []struct{ cost, descriptors int }{{1, 1}, {3, 1}, {300, 1}, {1, 3}} {
		cost := c.cost
		cfg := Config{Target: GRPC, Addr: "x", Domain: "edge", Attribute: "remote_address", KeyPrefix: "10.0.", Keys: 500, Cost: cost, Descriptors: c.descriptors, Concurrency: 1}.withDefaults()
		s := newWireClient(&cfg).session(newKeyPicker(&cfg, 0)).(*wireSession)
		keys := newKeyPicker(&cfg, 0)
		for range 20 {
			s.encode()
			req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: uint32(cost)}
			v := keys.nextString()
			for i := range c.descriptors {
				key := "remote_address"
				if i > 0 {
					key += strconv.Itoa(i + 1) // remote_address2, remote_address3
				}
				req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: v}}})
			}
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.msg[5:]; string(got) != string(want) {
				t.Fatalf("cost %d: encoded %x, want %x", cost, got, want)
			}
			if n := int(s.msg[1])<<24 | int(s.msg[2])<<16 | int(s.msg[3])<<8 | int(s.msg[4]); s.msg[0] != 0 || n != len(want) {
				t.Fatalf("gRPC prefix %x for a %d-byte message", s.msg[:5], len(want))
			}
		}
	}
}

// Both gRPC clients count the same answers, and the wire client keeps to
// a service's limit on concurrent streams.
func TestGRPCClientsAgree(t *testing.T) {
	for _, client := range []GRPCClient{WireClient, GoClient} {
		t.Run(string(client), func(t *testing.T) {
			f := &fakeRLS{t: t, e: &every3rd{delay: 100 * time.Microsecond}}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(grpc.MaxConcurrentStreams(3))
			rlsv3.RegisterRateLimitServiceServer(srv, f)
			go srv.Serve(lis)
			t.Cleanup(srv.Stop)
			s, err := Run(t.Context(), Config{
				Target: GRPC, Addr: lis.Addr().String(), Domain: "edge", Keys: 50, GRPCClient: client,
				Concurrency: 16, Conns: 1, Requests: 900, Duration: 10 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			if s.Requests != 900 || s.Allowed != 600 || s.Denied != 300 || s.Errors != 0 {
				t.Errorf("requests %d, allowed %d, denied %d, errors %d; want 900, 600, 300, 0 (errors: %v)",
					s.Requests, s.Allowed, s.Denied, s.Errors, s.ErrorKinds)
			}
		})
	}
}

// A call that outlives the timeout is an error, and the worker's next
// calls are answered normally.
func TestWireTimeout(t *testing.T) {
	f := &slowRLS{fakeRLS: fakeRLS{t: t, e: &every3rd{}}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	cfg := Config{Target: GRPC, Addr: addr, Domain: "edge", Timeout: 300 * time.Millisecond, Concurrency: 1}.withDefaults()
	cl := newWireClient(&cfg)
	defer cl.close()
	s := cl.session(newKeyPicker(&cfg, 0))
	ctx := context.Background()
	for i := range 6 {
		f.delay.Store(int64(i%2) * int64(time.Second))
		_, err := s.call(ctx)
		switch {
		case i%2 == 0 && err != nil:
			t.Errorf("call %d: %v", i, err)
		case i%2 == 1 && (err == nil || !strings.Contains(err.Error(), "DeadlineExceeded")):
			t.Errorf("call %d: err = %v, want a deadline error", i, err)
		}
	}
}

// slowRLS is a fakeRLS that takes delay to answer.
type slowRLS struct {
	fakeRLS
	delay atomic.Int64
}

func (f *slowRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	time.Sleep(time.Duration(f.delay.Load()))
	return f.fakeRLS.ShouldRateLimit(ctx, req)
}

// A service that goes away fails the calls in flight and the next ones,
// and the client dials again once it is back.
func TestWireRedialsAfterTheServiceStops(t *testing.T) {
	f := &fakeRLS{t: t, e: &every3rd{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	go srv.Serve(lis)
	cfg := Config{Target: GRPC, Addr: addr, Domain: "edge", Concurrency: 1}.withDefaults()
	cl := newWireClient(&cfg)
	defer cl.close()
	s := cl.session(newKeyPicker(&cfg, 0))
	ctx := context.Background()
	if _, err := s.call(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := s.call(ctx); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("calls still answered after the service stopped")
		}
	}
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	srv = grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	go srv.Serve(lis)
	defer srv.Stop()
	if _, err := s.call(ctx); err != nil {
		t.Errorf("after the service came back: %v", err)
	}
}
