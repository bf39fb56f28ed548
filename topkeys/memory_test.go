package topkeys_test

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/topkeys"
)

// TestFloodOfDistinctKeys sends a million distinct keys (a tenth of that
// under the race detector) through a rule whose every decision is a denial,
// over sixteen minutes, so that every minute of the ring fills for both
// kinds (decisions sampled as by default), with one key sent 1,000 times
// among them, evenly spread. The heap grows by no more than the
// sketch's bound, and the repeated key is in the top 10 of the last 15
// minutes with a count within its stated error.
func TestFloodOfDistinctKeys(t *testing.T) {
	n := 1_000_000
	if raceEnabled {
		n = 100_000
	}
	clock := floodgate.NewManualClock(start)
	// Limit 1, cost 2: every decision is denied (and charges nothing, so
	// the store holds no key).
	l, tops := observedSampled(t, clock, topkeys.DefaultDecisionSample, floodgate.Rule{Name: "per-ip", Key: []string{"ip"}, Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute})
	ctx := context.Background()
	attrs := floodgate.Attributes{"ip": ""}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	l.AllowN(ctx, floodgate.Attributes{"ip": "warm-up"}, 2)
	before := heap()
	perMinute := n / 16
	sent := 0
	for i := range n {
		if i > 0 && i%perMinute == 0 {
			clock.Advance(time.Minute)
		}
		attrs["ip"] = "10." + strconv.Itoa(i)
		if i%(n/1000) == n/2000 { // 1,000 times, evenly spread
			attrs["ip"] = "attacker"
			sent++
		}
		if d, err := l.AllowN(ctx, attrs, 2); err != nil || d.Allowed {
			t.Fatalf("decision %+v, %v: want a denial", d, err)
		}
	}
	grown := int64(heap()) - int64(before)
	// The bound: 2 kinds × 16 minutes × capacity keys at 200 bytes a key
	// (slot, heap entry, index entry, the key's bytes and the filter).
	bound := int64(2 * 16 * topkeys.DefaultCapacity * 200)
	t.Logf("%d decisions: heap grew %d bytes (bound %d)", n, grown, bound)
	if grown > bound {
		t.Errorf("heap grew %d bytes, more than the sketch's bound of %d", grown, bound)
	}
	for _, kind := range []topkeys.Kind{topkeys.Denials, topkeys.Decisions} {
		r := top(t, tops, "per-ip", kind, 15*time.Minute, 10)
		// Denials are all counted. Decisions are sampled 1 in k and scaled by
		// k, so the total is off by sqrt(n(k-1)) at one standard deviation:
		// 0.84% for the race detector's 100,000. Six of them fail once in
		// 500 million runs.
		want := int64(n) + 1 // and the warm-up
		k := float64(topkeys.DefaultDecisionSample)
		slack := int64(6 * math.Sqrt(float64(want)*(k-1)))
		if kind == topkeys.Denials && r.Total != want || r.Total < want-slack || r.Total > want+slack {
			t.Errorf("%s: total %d, want %d (decisions: ± %d, sampled)", kind, r.Total, want, slack)
		}
		found := false
		for rank, e := range r.Entries {
			if e.Key != "attacker" {
				continue
			}
			found = true
			t.Logf("%s: attacker at rank %d, count %d ± %d (sent %d)", kind, rank+1, e.Count, e.Error, sent)
			// Denials: an upper bound; sampled decisions: an estimate.
			if int64(sent) > e.Count+e.Error || int64(sent) < e.Count-e.Error || kind == topkeys.Denials && int64(sent) > e.Count {
				t.Errorf("%s: attacker sent %d times, reported %d with error %d", kind, sent, e.Count, e.Error)
			}
		}
		if !found {
			t.Errorf("%s: attacker not in the top 10: %v", kind, r.Entries)
		}
	}
}
