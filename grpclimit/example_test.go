package grpclimit_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
	"github.com/floodgate-go/floodgate/store/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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

// A daily token budget kept exactly: each call reserves the most it can use
// (here from the x-max-tokens metadata; a unary call's request message is
// at hand too) before its handler runs, and the reservation is settled with
// what the handler reports with AddCost when it returns. Concurrent calls
// then never spend more than the budget.
func Example_budget() {
	lim, err := floodgate.New("llm", memory.New(nil), []floodgate.Rule{
		{Name: "tokens-per-day", Algorithm: floodgate.FixedWindow, Limit: 1_000_000, Align: floodgate.AlignDay, Key: []string{"api-key"}, Reservable: true},
	}, nil)
	if err != nil {
		panic(err)
	}
	limit, err := grpclimit.New(lim, &grpclimit.Options{
		Attributes: map[string]grpclimit.KeyFunc{"api-key": grpclimit.Metadata("x-api-key")},
		Reserve: func(ctx context.Context, _ string, _ any) int64 {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("x-max-tokens"); len(v) > 0 {
				n, _ := strconv.ParseInt(v[0], 10, 64)
				return n
			}
			return 4096 // the model's default max_tokens
		},
		Hold: 10 * time.Minute, // longer than the slowest answer
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limit.Unary()), grpc.ChainStreamInterceptor(limit.Stream()))
	defer srv.Stop()
	fmt.Println("ready")
	// Output: ready
}
