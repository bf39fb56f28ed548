package floodgate_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

var tokenWeights = floodgate.Weights{"input": 1, "output": 3}

func TestWeightsCost(t *testing.T) {
	for _, tt := range []struct {
		usage floodgate.Usage
		want  int64
		err   string
	}{
		{usage: floodgate.Usage{"input": 2, "output": 3}, want: 11},
		{usage: floodgate.Usage{"input": 7}, want: 7},
		{usage: floodgate.Usage{}, want: 0},
		{usage: nil, want: 0},
		{usage: floodgate.Usage{"input": 1, "audio": 4}, err: `unknown token class "audio"`},
		{usage: floodgate.Usage{"output": -1}, err: `token class "output": count -1 must not be negative`},
		{usage: floodgate.Usage{"output": 1 << 52}, err: "weighted cost exceeds"},
	} {
		got, err := tokenWeights.Cost(tt.usage)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Cost(%v): error %v, want one containing %q", tt.usage, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("Cost(%v) = %d, %v; want %d", tt.usage, got, err, tt.want)
		}
	}
	if err := (floodgate.Weights{"output": -3}).Validate(); err == nil {
		t.Error("a negative weight validated")
	}
	if err := tokenWeights.Validate(); err != nil {
		t.Error(err)
	}
}

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
	serve := func(usage floodgate.Usage) floodgate.Decision {
		t.Helper()
		kd := keys.Allow(g.ctx, alice)
		if !kd.Allowed {
			t.Fatalf("key refused: %+v", kd)
		}
		sel := floodgate.Select(g.ctx, []floodgate.Candidate{route})
		if !sel.Allowed {
			t.Fatalf("route refused: %+v", sel)
		}
		cost, err := tokenWeights.Cost(usage)
		if err != nil {
			t.Fatal(err)
		}
		d, err := keyTokens.Settle(g.ctx, kd.Ticket(), alice, cost)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := routeTokens.Settle(g.ctx, sel.Decision.Ticket(), route.Attrs, cost); err != nil {
			t.Fatal(err)
		}
		return d
	}

	// 2 input + 3 output tokens at weights 1 and 3 cost 11.
	if d := serve(floodgate.Usage{"input": 2, "output": 3}); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("after 11 of 20: allowed=%v remaining=%d", d.Allowed, d.Remaining)
	}
	g.wantLeft(keys, alice, map[string]int64{"key-rpm": 99, "key-tpm": 9})
	g.wantLeft(route.Limiter, route.Attrs, map[string]int64{"rpm": 99, "tpm": 89})

	// The second request is admitted (9 left) and its 11 push the key to
	// 22 of 20.
	g.clock.Advance(5 * time.Second)
	if d := serve(floodgate.Usage{"input": 2, "output": 3}); d.Allowed {
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
	kd := keys.Allow(g.ctx, bob)
	cost, _ := tokenWeights.Cost(floodgate.Usage{"input": 2, "output": 3})
	if _, err := keyTokens.Settle(g.ctx, kd.Ticket(), bob, cost); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, bob, map[string]int64{"key-rpm": 99, "key-tpm": 39})
	g.wantLeft(route.Limiter, route.Attrs, map[string]int64{"rpm": 10, "tpm": 1000})
}

func testSettleBelowDeposit(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	keys, keyTokens := g.keyLimiter(100, 50)
	carol := floodgate.Attributes{"key": "carol"}

	// An admission that used no tokens (the upstream failed): the unit the
	// admission charged to key-tpm goes back; key-rpm keeps its count.
	kd := keys.Allow(g.ctx, carol)
	if _, err := keyTokens.Settle(g.ctx, kd.Ticket(), carol, 0); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, carol, map[string]int64{"key-rpm": 99, "key-tpm": 50})

	// Without an admission ticket, Settle records the whole cost.
	if _, err := keyTokens.Settle(g.ctx, floodgate.Ticket{}, carol, 7); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, carol, map[string]int64{"key-rpm": 99, "key-tpm": 43})

	// A decision of another limiter charged none of these rules.
	other := g.route("x", 10, 10)
	sel := floodgate.Select(g.ctx, []floodgate.Candidate{other})
	if _, err := keyTokens.Settle(g.ctx, sel.Decision.Ticket(), carol, 3); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, carol, map[string]int64{"key-tpm": 40})

	// A ticket that went through the service's encoding settles the same.
	kd = keys.Allow(g.ctx, carol)
	b, _ := kd.Ticket().MarshalBinary()
	var decoded floodgate.Ticket
	if err := decoded.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if _, err := keyTokens.Settle(g.ctx, decoded, carol, 5); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(keys, carol, map[string]int64{"key-rpm": 98, "key-tpm": 35})

	if _, err := keyTokens.Settle(g.ctx, kd.Ticket(), carol, -1); err == nil {
		t.Error("a negative settled cost was accepted")
	}
}

// An admission decided by a failed store under FailOpen charged nothing, so
// Settle records the whole cost.
func TestSettleAfterFailOpen(t *testing.T) {
	g := newGW(t, memoryStore, gwStart)
	down := floodgate.Store(downStore{})
	l, err := floodgate.New("keys", down, []floodgate.Rule{perMinute("key-rpm", 10, "key"), perMinute("key-tpm", 50, "key")},
		&floodgate.Options{Clock: g.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	kd := l.Allow(g.ctx, floodgate.Attributes{"key": "dave"})
	if !kd.Allowed || kd.Reason != floodgate.ReasonStore || kd.Ticket().Valid() {
		t.Fatalf("fail-open admission: %+v", kd)
	}
	// The same rules over a working store: the whole cost lands.
	healthy := g.limiter("keys", floodgate.FailOpen, perMinute("key-rpm", 10, "key"), perMinute("key-tpm", 50, "key"))
	tokens, _ := healthy.Only("key-tpm")
	if _, err := tokens.Settle(g.ctx, kd.Ticket(), floodgate.Attributes{"key": "dave"}, 11); err != nil {
		t.Fatal(err)
	}
	g.wantLeft(healthy, floodgate.Attributes{"key": "dave"}, map[string]int64{"key-rpm": 10, "key-tpm": 39})
}
