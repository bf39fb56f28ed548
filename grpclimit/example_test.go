package grpclimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
	"github.com/floodgate-go/floodgate/store/memory"
	"google.golang.org/grpc"
)

// A gRPC server limited per caller address and per API key; calls over the
// limit fail with codes.ResourceExhausted and a RetryInfo detail.
func Example() {
	lim, err := floodgate.New("rpc", memory.New(nil), []floodgate.Rule{
		{Name: "per-ip", Algorithm: floodgate.TokenBucket, Limit: 100, Window: time.Second, Key: []string{"ip"}},
		{Name: "per-key", Algorithm: floodgate.FixedWindow, Limit: 10000, Window: time.Hour, Key: []string{"api-key"}},
	}, nil)
	if err != nil {
		panic(err)
	}
	limit, err := grpclimit.New(lim, &grpclimit.Options{Attributes: map[string]grpclimit.KeyFunc{
		"ip":      grpclimit.PeerIP(nil), // the socket peer; pass a clientip.Resolver to trust proxies
		"api-key": grpclimit.Metadata("x-api-key"),
	}})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limit.Unary()),
		grpc.ChainStreamInterceptor(limit.Stream()),
	)
	defer srv.Stop()
	fmt.Println("ready")
	// Output: ready
}

// A limit on tokens per minute for an LLM method, charged after each call
// with the tokens it used: calls are admitted while a token is left, and the
// handler reports its usage with AddCost.
func ExampleAddCost() {
	lim, err := floodgate.New("llm", memory.New(nil), []floodgate.Rule{
		{Name: "tokens", Algorithm: floodgate.SlidingWindow, Limit: 100_000, Window: time.Minute, Key: []string{"api-key"}},
	}, nil)
	if err != nil {
		panic(err)
	}
	limit, err := grpclimit.New(lim, &grpclimit.Options{
		Attributes:  map[string]grpclimit.KeyFunc{"api-key": grpclimit.Metadata("x-api-key")},
		ChargeAfter: true,
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limit.Unary()))
	defer srv.Stop()

	// In the method's handler, once the response is known:
	complete := func(ctx context.Context, promptTokens, outputTokens int64) {
		grpclimit.AddCost(ctx, promptTokens+outputTokens)
	}
	// Outside an interceptor with ChargeAfter, AddCost charges nothing and
	// says so.
	fmt.Println(grpclimit.AddCost(context.Background(), 1))
	_ = complete
	// Output: false
}
