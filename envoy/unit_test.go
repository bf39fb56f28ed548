package envoy_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/envoy"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/redis"
)

func hotDomain(t *testing.T, unit string, limit int) *envoy.Config {
	t.Helper()
	cfg, err := envoy.NewConfig(mustParse(t, "hot.yaml",
		"domain: hot\ndescriptors:\n  - key: hot\n    rate_limit: {unit: "+unit+", requests_per_unit: "+strconv.Itoa(limit)+"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestUnitChange reloads a descriptor from 3/second to 9/minute and back,
// on memory and on Redis: the minute starts afresh (9 admitted, not 6) and
// admits no more, and back at 3/second the key admits 3 at once instead of
// waiting for the minute to end. Both units shared one key before.
func TestUnitChange(t *testing.T) {
	for _, st := range []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"memory", func(t *testing.T) store.Store {
			m := memory.New(&memory.Options{SweepInterval: -1})
			t.Cleanup(func() { m.Close() })
			return m
		}},
		{"redis", func(t *testing.T) store.Store {
			srv := redistest.Start(t)
			rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close() })
			return rs
		}},
	} {
		t.Run(st.name, func(t *testing.T) {
			h := start(t, hotDomain(t, "second", 3), st.open(t), nil)
			admitted := func(n int) (got int) {
				for range n {
					if h.ask("hot", 0, desc("hot", "h1")).OverallCode == ok {
						got++
					}
				}
				return got
			}
			if got := admitted(5); got != 3 {
				t.Fatalf("3/second admitted %d of 5", got)
			}
			h.clock.Advance(100 * time.Millisecond)
			if err := h.svc.Update(hotDomain(t, "minute", 9), nil); err != nil {
				t.Fatal(err)
			}
			if got := admitted(12); got != 9 {
				t.Errorf("right after the switch to 9/minute: %d of 12 admitted, want 9", got)
			}
			h.clock.Advance(2 * time.Second) // the second's key has expired
			if got := admitted(3); got != 0 {
				t.Errorf("2s later, in the same minute: %d more admitted", got)
			}
			if err := h.svc.Update(hotDomain(t, "second", 3), nil); err != nil {
				t.Fatal(err)
			}
			if got := admitted(5); got != 3 {
				t.Errorf("right after the switch back to 3/second: %d of 5 admitted, want 3", got)
			}
		})
	}
}
