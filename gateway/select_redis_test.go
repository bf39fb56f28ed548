package gateway_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/gateway"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/overlimit"
	"github.com/floodgate-go/floodgate/store/redis"
)

// TestGatewayRedis runs the gateway suite on a real Redis (started on a free
// loopback port), the scripts driven by the tests' manual clock. Each test
// writes under its own key prefix.
func TestGatewayRedis(t *testing.T) {
	srv := redistest.Start(t)
	runGateway(t, func(t *testing.T) store.Store {
		s, err := redis.New(&redis.Options{
			URL:          "redis://" + srv.Addr,
			KeyPrefix:    "gw:" + t.Name() + ":",
			UseBatchTime: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestSelectRedisCommands counts the Redis commands of a selection: each
// candidate decided is one script call (its RPM and TPM caps checked and
// counted together), and settling tokens is one more. With the over-limit
// cache on (the default), a candidate whose caps are all known to be spent
// costs no round trip at all (one with a cap left goes to Redis: that cap
// might deny it for longer).
func TestSelectRedisCommands(t *testing.T) {
	srv := redistest.Start(t)
	scripts := func() int64 {
		c := srv.CommandCalls()
		return c["fcall"]
	}
	for _, tt := range []struct {
		name      string
		cacheSize int
		want      int64 // script calls of the measured selection
	}{
		{"no over-limit cache", -1, 3},
		{"over-limit cache", 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "cmd:" + tt.name + ":", UseBatchTime: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close() })
			var s store.Store = rs
			if tt.cacheSize >= 0 {
				s = overlimit.New(rs, &overlimit.Options{Size: tt.cacheSize})
			}
			g := newGW(t, func(*testing.T) store.Store { return s }, gwStart)
			routes := []gateway.Candidate{g.route("a", 1, 1), g.route("b", 1, 1), g.route("c", 10, 100)}
			gateway.Select(g.ctx, routes[:1]) // a spent
			gateway.Select(g.ctx, routes[1:2])
			gateway.Select(g.ctx, routes[:2]) // b spent; the cache learns both caps of both

			before := scripts()
			sel := gateway.Select(g.ctx, routes)
			if !sel.Allowed || sel.Name != "c" {
				t.Fatalf("selection %+v, want c", sel)
			}
			if got := scripts() - before; got != tt.want {
				t.Errorf("a selection over 3 candidates (2 capped) ran %d scripts, want %d", got, tt.want)
			}
			tokens, _ := routes[2].Limiter.Only("tpm")
			before = scripts()
			gateway.RecordUsage(g.ctx, tokens, sel.Ticket(), routes[2].Attrs, 11)
			if got := scripts() - before; got != 1 {
				t.Errorf("settling ran %d scripts, want 1", got)
			}
		})
	}
}
