package gateway_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/gateway"
	"github.com/floodgate-go/floodgate/store"
)

// keyLimiter is an API key's admission limiter: requests and tokens per
// minute.
func (g *gw) keyLimiter(rpm, tpm int64) (*floodgate.Limiter, *floodgate.Limiter) {
	g.t.Helper()
	l := g.limiter("keys", floodgate.FailOpen, perMinute("key-rpm", rpm, "key"), perMinute("key-tpm", tpm, "key"))
	tokens, err := l.Only("key-tpm")
	if err != nil {
		g.t.Fatal(err)
	}
	return l, tokens
}

func testWeightedTokens(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	keys, keyTokens := g.keyLimiter(100, 20)
	route := g.route("a", 100, 100)
	routeTokens, err := route.Limiter.Only("tpm")
	if err != nil {
		t.Fatal(err)
	}
	alice := floodgate.Attributes{"key": "alice"}

	// serve runs one request through the gateway's steps and returns the
	// key's token decision after it was recorded.
	serve := func(usage gateway.Usage) floodgate.Decision {
		t.Helper()
		kd, kt := g.admit(keys, alice)
		if !kd.Allowed {
			t.Fatalf("key refused: %+v", kd)
		}
		sel := gateway.Select(g.ctx, []gateway.Candidate{route})
		if !sel.Allowed {
			t.Fatalf("route refused: %+v", sel)
		}
		cost, err := tokenWeights.Cost(usage)
		if err != nil {
			t.Fatal(err)
		}
		d, err := gateway.RecordUsage(g.ctx, keyTokens, kt, alice, cost)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gateway.RecordUsage(g.ctx, routeTokens, sel.Ticket(), route.Attrs, cost); err != nil {
			t.Fatal(err)
		}
		return d.Decision
	}

	// 2 input + 3 output tokens at weights 1 and 3 cost 11.
	if d := serve(gateway.Usage{"input": 2, "output": 3}); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("after 11 of 20: allowed=%v remaining=%d", d.Allowed, d.Remaining)
	}
	g.wantLeft(keys, alice, map[string]int64{"key-rpm": 99, "key-tpm": 9})
	g.wantLeft(route.Limiter, route.Attrs, map[string]int64{"rpm": 99, "tpm": 89})

	// The second request is admitted (9 left) and its 11 push the key to
	// 22 of 20.
	g.clock.Advance(5 * time.Second)
	if d := serve(gateway.Usage{"input": 2, "output": 3}); d.Allowed {
		t.Fatalf("22 of 20 recorded, yet a request would be admitted: %+v", d)
	}
	g.wantLeft(route.Limiter, route.Attrs, map[string]int64{"rpm": 98, "tpm": 78})

	// The next request is refused by the key's TPM until the first 11
	// leave the window at 60s: from 6s, that is 54s, exactly.
	g.clock.Advance(time.Second)
	d := keys.Allow(g.ctx, alice)
	if d.Allowed || d.Rule != "key-tpm" || d.RetryAfter != 54*time.Second {
		t.Fatalf("over the TPM: allowed=%v rule=%s retry-after=%v, want denied by key-tpm for 54s", d.Allowed, d.Rule, d.RetryAfter)
	}
	g.wantLeft(keys, alice, map[string]int64{"key-rpm": 98}) // the refusal counted nothing
	g.clock.Advance(d.RetryAfter - time.Microsecond)
	if d := keys.Allow(g.ctx, alice); d.Allowed {
		t.Fatal("admitted a microsecond before the retry-after")
	}
	g.clock.Advance(time.Microsecond)
	if d := keys.Allow(g.ctx, alice); !d.Allowed {
		t.Fatalf("denied at the retry-after: %+v", d)
	}
}

func testCacheHit(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	keys, keyTokens := g.keyLimiter(100, 50)
	route := g.route("a", 10, 1000)
	bob := floodgate.Attributes{"key": "bob"}

	// A cached answer: the key is admitted and charged its tokens; no
	// route is selected, so no route counter moves.
	_, kt := g.admit(keys, bob)
	cost, _ := tokenWeights.Cost(gateway.Usage{"input": 2, "output": 3})
	if _, err := gateway.RecordUsage(g.ctx, keyTokens, kt, bob, cost); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, bob, map[string]int64{"key-rpm": 99, "key-tpm": 39})
	g.wantLeft(route.Limiter, route.Attrs, map[string]int64{"rpm": 10, "tpm": 1000})
}

func testRecordUsageBelowDeposit(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	keys, keyTokens := g.keyLimiter(100, 50)
	carol := floodgate.Attributes{"key": "carol"}

	// An admission that used no tokens (the upstream failed): the unit the
	// admission charged to key-tpm goes back; key-rpm keeps its count.
	_, kt := g.admit(keys, carol)
	if _, err := gateway.RecordUsage(g.ctx, keyTokens, kt, carol, 0); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, carol, map[string]int64{"key-rpm": 99, "key-tpm": 50})

	// Without an admission ticket, RecordUsage records the whole cost.
	if _, err := gateway.RecordUsage(g.ctx, keyTokens, floodgate.Ticket{}, carol, 7); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, carol, map[string]int64{"key-rpm": 99, "key-tpm": 43})

	// A decision of another limiter charged none of these rules.
	other := g.route("x", 10, 10)
	sel := gateway.Select(g.ctx, []gateway.Candidate{other})
	if _, err := gateway.RecordUsage(g.ctx, keyTokens, sel.Ticket(), carol, 3); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, carol, map[string]int64{"key-tpm": 40})

	// A ticket that went through the service's encoding settles the same.
	_, kt = g.admit(keys, carol)
	b, _ := kt.MarshalBinary()
	var decoded floodgate.Ticket
	if err := decoded.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.RecordUsage(g.ctx, keyTokens, decoded, carol, 5); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, carol, map[string]int64{"key-rpm": 98, "key-tpm": 35})

	if _, err := gateway.RecordUsage(g.ctx, keyTokens, kt, carol, -1); err == nil {
		t.Error("a negative settled cost was accepted")
	}
	if _, err := gateway.RecordUsage(g.ctx, nil, kt, carol, 5); err == nil {
		t.Error("RecordUsage without a limiter succeeded")
	}
}

// An admission decided by a failed store under FailOpen charged nothing, so
// RecordUsage records the whole cost.
func TestRecordUsageAfterFailOpen(t *testing.T) {
	g := newGW(t, memoryStore, gwStart)
	down := store.Store(downStore{})
	l, err := floodgate.New("keys", down, []floodgate.Rule{perMinute("key-rpm", 10, "key"), perMinute("key-tpm", 50, "key")},
		&floodgate.Options{Clock: g.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	kd, kt := g.admit(l, floodgate.Attributes{"key": "dave"})
	if !kd.Allowed || kd.Reason != floodgate.ReasonStore || kt.Valid() {
		t.Fatalf("fail-open admission: %+v", kd)
	}
	// The same rules over a working store: the whole cost lands.
	healthy := g.limiter("keys", floodgate.FailOpen, perMinute("key-rpm", 10, "key"), perMinute("key-tpm", 50, "key"))
	tokens, _ := healthy.Only("key-tpm")
	if _, err := gateway.RecordUsage(g.ctx, tokens, kt, floodgate.Attributes{"key": "dave"}, 11); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(healthy, floodgate.Attributes{"key": "dave"}, map[string]int64{"key-rpm": 10, "key-tpm": 39})
}
