package grpclimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// budgetRules are an LLM service's limits: 100 calls a minute and a
// reservable budget of tokens per caller.
func budgetRules(tokens int64) []floodgate.Rule {
	return []floodgate.Rule{
		{Name: "rpm", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute, Key: []string{"ip"}},
		{Name: "tokens", Algorithm: floodgate.FixedWindow, Limit: tokens, Window: time.Hour, Align: floodgate.AlignClock, Key: []string{"ip"}, Reservable: true},
	}
}

// maxTokens reserves what a call asks for: a unary call's request names it
// ("8000:1000" is max_tokens 8,000, of which the answer uses 1,000), a
// stream's "x-max-tokens" metadata.
func maxTokens(ctx context.Context, _ string, req any) int64 {
	if r, ok := req.(*healthpb.HealthCheckRequest); ok {
		most, _, _ := strings.Cut(r.Service, ":")
		n, _ := strconv.ParseInt(most, 10, 64)
		return n
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-max-tokens"); len(v) > 0 {
		n, _ := strconv.ParseInt(v[0], 10, 64)
		return n
	}
	return 0
}

// tokensHealth answers Check and Watch as an LLM service would: it reports
// the tokens its request's service name says it used ("8000:1000" uses
// 1,000), after waiting on slow when the name ends in ":slow", and fails
// having used nothing when it ends in ":fail".
type tokensHealth struct {
	healthpb.UnimplementedHealthServer
	entered, slow chan struct{}
}

func (h tokensHealth) answer(ctx context.Context, service string) error {
	_, used, _ := strings.Cut(service, ":")
	switch used {
	case "slow":
		h.entered <- struct{}{}
		<-h.slow
		used = "1000"
	case "fail":
		return status.Error(codes.Unavailable, "the model failed")
	}
	n, _ := strconv.ParseInt(used, 10, 64)
	if !AddCost(ctx, n) {
		return errors.New("AddCost found no interceptor")
	}
	return nil
}

func (h tokensHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := h.answer(ctx, req.Service); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h tokensHealth) Watch(req *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	if err := h.answer(ss.Context(), req.Service); err != nil {
		return err
	}
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// serveTokens starts a real gRPC server on loopback serving h behind in,
// and returns a client.
func serveTokens(t *testing.T, in *Interceptor, h tokensHealth) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// tokensLeft peeks at what each rule of lim has left for 127.0.0.1.
func tokensLeft(t *testing.T, lim *floodgate.Limiter) map[string]int64 {
	t.Helper()
	o, err := lim.Decide(context.Background(), floodgate.ModePeek, floodgate.Attributes{"ip": "127.0.0.1"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range o.Rules {
		out[r.Name] = r.Remaining
	}
	return out
}

// TestReserve: a call holds its max_tokens while its handler runs, so a
// concurrent call that does not fit beside it is refused; when the handler
// returns the reservation is settled with what it reported, for unary
// calls and streams alike, and a call that failed having used nothing
// gives it all back.
func TestReserve(t *testing.T) {
	lim, _, _ := newLimiter(t, budgetRules(10_000))
	in := mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}, Reserve: maxTokens, Hold: time.Minute})
	h := tokensHealth{entered: make(chan struct{}), slow: make(chan struct{})}
	client := serveTokens(t, in, h)
	ctx := context.Background()

	done := make(chan error)
	go func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "8000:slow"})
		done <- err
	}()
	<-h.entered
	if got := tokensLeft(t, lim)["tokens"]; got != 2000 {
		t.Errorf("while the first call runs: %d tokens left, want 2000 (8,000 held)", got)
	}
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "4000:1000"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "rate limit exceeded") {
		t.Errorf("a call that does not fit beside the held tokens: %v, want ResourceExhausted", err)
	}
	close(h.slow)
	if err := <-done; err != nil {
		t.Fatalf("first call: %v", err)
	}
	if got := tokensLeft(t, lim); got["tokens"] != 9000 || got["rpm"] != 99 {
		t.Errorf("after the first call: %v, want 9000 tokens (1,000 used) and 99 calls (the refused one charged nothing)", got)
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "4000:fail"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("the failing call: %v", err)
	}
	stream, err := client.Watch(metadata.AppendToOutgoingContext(ctx, "x-max-tokens", "3000"), &healthpb.HealthCheckRequest{Service: ":2500"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); tokensLeft(t, lim)["tokens"] != 6500; {
		if time.Now().After(deadline) { // the settlement lands when the handler returns
			t.Fatalf("after a failed call and a stream that used 2,500: %v, want 6500 tokens", tokensLeft(t, lim))
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "20000:1"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "can ever admit") {
		t.Errorf("a reservation over the whole budget: %v, want ResourceExhausted that says it never fits", err)
	}
}

// TestReserveKeepsTheBudget: 20 concurrent callers, each call reserving
// its max_tokens of 8,000 and using 1,000 to 8,000, against a budget of
// 100,000: never overspent, and used to within a reservation of its end.
func TestReserveKeepsTheBudget(t *testing.T) {
	const budget, callers, most = 100_000, 20, 8_000
	rules := budgetRules(budget)
	rules[0].Limit = 1_000_000 // calls are not what is limited here
	lim, _, _ := newLimiter(t, rules)
	in := mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}, Reserve: maxTokens, Hold: time.Minute})
	client := serveTokens(t, in, tokensHealth{})
	var spent, demanded atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for refused := 0; refused < 50 && time.Now().Before(deadline); {
				used := 1000 + rand.Int64N(most-1000+1)
				demanded.Add(used)
				_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: strconv.Itoa(most) + ":" + strconv.FormatInt(used, 10)})
				switch status.Code(err) {
				case codes.OK:
					spent.Add(used)
				case codes.ResourceExhausted:
					refused++
					time.Sleep(time.Millisecond)
				default:
					t.Errorf("call: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := spent.Load()
	t.Logf("%d tokens demanded, %d spent of %d", demanded.Load(), got, budget)
	switch {
	case demanded.Load() <= budget:
		t.Fatalf("%d tokens demanded: the load did not exceed the budget", demanded.Load())
	case got > budget:
		t.Errorf("%d tokens spent, over the budget of %d", got, budget)
	case got < budget*9/10:
		t.Errorf("%d tokens spent, under 90%% of the budget of %d", got, budget)
	}
	if l := tokensLeft(t, lim)["tokens"]; l != budget-got {
		t.Errorf("the store has %d tokens left, want %d: the budget less what was spent", l, budget-got)
	}
}

// TestReserveErrors: reservations are checked when the interceptor is
// made.
func TestReserveErrors(t *testing.T) {
	ip := map[string]KeyFunc{"ip": PeerIP(nil)}
	budget, _, _ := newLimiter(t, budgetRules(100))
	plain, _, _ := newLimiter(t, []floodgate.Rule{{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"ip"}}})
	for _, tt := range []struct {
		lim  *floodgate.Limiter
		opts *Options
		want string
	}{
		{budget, &Options{Attributes: ip, Reserve: maxTokens}, "Reserve needs a Hold"},
		{budget, &Options{Attributes: ip, Hold: time.Minute}, "only Reserve makes"},
		{budget, &Options{Attributes: ip, Reserve: maxTokens, Hold: time.Minute, Count: CountSuccesses}, "cannot be combined with Count"},
		{budget, &Options{Attributes: ip, Reserve: maxTokens, Hold: time.Minute, ChargeAfter: true}, "cannot be combined with ChargeAfter"},
		{plain, &Options{Attributes: ip, Reserve: maxTokens, Hold: time.Minute}, "need a reservable rule"},
	} {
		_, err := New(tt.lim, tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New: %v, want an error containing %q", err, tt.want)
		}
	}
}
