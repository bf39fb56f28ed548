package floodgate_test

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/redis"
)

// TestGatewayRedis runs the gateway suite on a real Redis (started on a free
// loopback port), the scripts driven by the tests' manual clock. Each test
// writes under its own key prefix.
func TestGatewayRedis(t *testing.T) {
	srv := redistest.Start(t)
	runGateway(t, func(t *testing.T) floodgate.Store {
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
