package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/internal/redistest"
)

// An Envoy AI Gateway token budget, as docs/envoy.md configures it: 10,000
// tokens an hour per user.
const aiDomain = `domain: ai
descriptors:
  - key: user_id
    rate_limit: {unit: hour, requests_per_unit: 10000}
`

// budgetCalls replays what Envoy AI Gateway sends for one user: before
// each request a check (hits_addend 0), and when the response stream is
// done a charge of its tokens (hits_addend 4,000, the answer ignored).
// The budget is crossed by the third response: that charge is refused and
// still spent, so every later check is over the limit, as the reference
// service answers.
func budgetCalls(t *testing.T, rls rlsv3.RateLimitServiceClient, user string) {
	t.Helper()
	ask := func(hits uint64) (rlsv3.RateLimitResponse_Code, uint32) {
		t.Helper()
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai",
			Descriptors: []*commonv3.RateLimitDescriptor{withHits(desc("user_id", user), hits)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode, resp.Statuses[0].LimitRemaining
	}
	type call struct {
		hits      uint64
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}
	for i, c := range []call{
		{0, ok, 10000}, {4000, ok, 6000}, // request 1
		{0, ok, 6000}, {4000, ok, 2000}, // request 2
		{0, ok, 2000}, {4000, over, 0}, // request 3: the charge crosses the budget
		{0, over, 0}, // request 4 is refused, and so on
		{0, over, 0},
		{0, over, 0},
	} {
		code, rem := ask(c.hits)
		if code != c.code || (code == ok && rem != c.remaining) {
			t.Errorf("call %d (hits_addend %d): %v with %d remaining, want %v with %d", i+1, c.hits, code, rem, c.code, c.remaining)
		}
	}
}

// reserveCalls replays the exact-budget pattern: 4,000 tokens reserved with
// the request, and the unused 3,000 given back with is_negative_hits after
// a 1,000-token response; a give-back of more than was charged leaves
// nothing counted, never less.
func reserveCalls(t *testing.T, rls rlsv3.RateLimitServiceClient, user string) {
	t.Helper()
	ask := func(hits uint64, negative bool) uint32 {
		t.Helper()
		d := withHits(desc("user_id", user), hits)
		d.IsNegativeHits = negative
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai",
			Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != ok {
			t.Fatalf("hits %d (negative %v): %v", hits, negative, resp.OverallCode)
		}
		return resp.Statuses[0].LimitRemaining
	}
	if got := ask(4000, false); got != 6000 {
		t.Errorf("after reserving 4,000: %d remaining, want 6000", got)
	}
	if got := ask(3000, true); got != 9000 {
		t.Errorf("after giving 3,000 back: %d remaining, want 9000", got)
	}
	if got := ask(0, false); got != 9000 {
		t.Errorf("a check after the give-back: %d remaining, want 9000", got)
	}
	if got := ask(5000, true); got != 10000 {
		t.Errorf("after giving back more than was charged: %d remaining, want 10000", got)
	}
}

// TestEnvoyTokenBudget replays Envoy AI Gateway's calls against floodgate's
// own configuration with an Envoy directory, on both stores.
func TestEnvoyTokenBudget(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		dir := filepath.Join(t.TempDir(), "envoy")
		os.Mkdir(dir, 0o755)
		write(t, filepath.Join(dir, "ai.yaml"), aiDomain)
		s := startService(t, store+e2eConfig, nil, "--envoy-config-dir", dir)
		rls := dialRLS(t, s.grpc)
		budgetCalls(t, rls, "alice")
		reserveCalls(t, rls, "bob")
	})
}

// TestReferenceTokenBudget replays the same calls against floodgate started
// with the reference service's environment alone, with and without
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: with one descriptor the
// reference charges the refused hit either way.
func TestReferenceTokenBudget(t *testing.T) {
	for _, stop := range []string{"false", "true"} {
		t.Run("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="+stop, func(t *testing.T) {
			srv := redistest.Start(t)
			root := refRuntime(t)
			write(t, filepath.Join(root, "ratelimit", "config", "ai.yaml"), aiDomain)
			env := referenceEnvFor(root, srv.Addr)
			env["STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"] = stop
			s := startReference(t, env)
			rls := dialRLS(t, s.grpc)
			budgetCalls(t, rls, "alice")
			reserveCalls(t, rls, "bob")
		})
	}
}

// dialRLS connects a rate limit service client to addr, closed when the
// test ends.
func dialRLS(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}
