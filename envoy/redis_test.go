package envoy_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/envoy"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/grant"
	"github.com/floodgate-go/floodgate/store/overlimit"
	"github.com/floodgate-go/floodgate/store/redis"
)

// twoLimits is the "another" domain of the reference service's
// integration test, with a shadow limit added.
const twoLimits = `domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// On Redis with its local over-limit cache, a request whose descriptors
// include one the cache knows to be over the limit still gets the real
// status of every other descriptor: what is left and when it resets, not
// a full limit without a reset.
func TestRedisOverLimitCacheKeepsOtherStatuses(t *testing.T) {
	for _, cache := range []int{-1, 0} { // no over-limit cache, and the default one
		srv := redistest.Start(t)
		rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		var st store.Store = rs
		if cache >= 0 {
			st = overlimit.New(rs, &overlimit.Options{Size: cache})
		}
		cfg, err := envoy.NewConfig(mustParse(t, "another.yaml", twoLimits))
		if err != nil {
			t.Fatal(err)
		}
		// A deadline no loaded machine reaches: a store timeout would be a
		// failure-policy answer, not the statuses this test is about.
		h := start(t, cfg, st, nil)
		const minuteLeft, hourLeft = 30 * time.Second, 2790 * time.Second
		for i := range 15 {
			resp := h.ask("another", 0, desc("key2", "v"), desc("key3", "v"))
			if i < 10 {
				h.check(resp, ok, want{ok, 20, minute, uint32(19 - i), minuteLeft}, want{ok, 10, hour, uint32(9 - i), hourLeft})
				continue
			}
			// Over on key3: nothing is charged to key2, which has 10 left.
			h.check(resp, over, want{ok, 20, minute, 10, minuteLeft}, want{over, 10, hour, 0, hourLeft})
		}
		// A shadow limit over its limit reports nothing left, and lets the
		// request through.
		for i := range 3 {
			h.check(h.ask("another", 0, desc("shadow", "s"), desc("key2", "w")), ok,
				want{ok, 1, minute, 0, minuteLeft}, want{ok, 20, minute, uint32(19 - i), minuteLeft})
		}
		// Next to a descriptor the cache knows to be over, the exceeded
		// shadow limit still reports nothing left.
		h.check(h.ask("another", 0, desc("shadow", "s"), desc("key3", "v")), over,
			want{ok, 1, minute, 0, minuteLeft}, want{over, 10, hour, 0, hourLeft})
		if t.Failed() {
			t.Fatalf("deny cache size %d: see above", cache)
		}
	}
}

// granted is a domain whose one limit opts in to quota grants.
const granted = `domain: llm
descriptors:
  - key: model
    rate_limit:
      unit: hour
      requests_per_unit: 5000
      floodgate: {grant: true}
`

// A limit with grant: true is answered in-process from grants that Redis
// charged beforehand: it admits exactly its limit, most decisions never
// reach Redis, and every key Redis holds expires.
func TestRedisGrantedLimit(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	g := grant.New(rs, nil)
	t.Cleanup(func() { g.Close() })
	cfg, err := envoy.NewConfig(mustParse(t, "llm.yaml", granted))
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cfg, g, nil)
	for _, ls := range h.svc.Limits() {
		if ls.Domain == "llm" && (len(ls.Rules) != 1 || !ls.Rules[0].Grant) {
			t.Fatalf("rules of llm = %+v, want one with Grant", ls.Rules)
		}
	}
	admitted := 0
	for range 5600 {
		if h.ask("llm", 0, desc("model", "m")).OverallCode == ok {
			admitted++
		}
	}
	if admitted != 5000 {
		t.Errorf("admitted %d of 5600 in one window, want the limit, 5000", admitted)
	}
	// Grants are 1/32 of what is left, down to 8 units (256 left): about
	// 95 grants answer 4,750 decisions; the rest go to Redis one by one.
	st := g.Stats()
	if st.Local < 4500 || st.Grants > 150 {
		t.Errorf("stats %+v: want most decisions answered locally from few grants", st)
	}
	if keys, err := srv.KeysWithoutTTL(); err != nil || len(keys) > 0 {
		t.Errorf("keys without a TTL: %v (%v)", keys, err)
	}
}
