package topkeys_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/topkeys"
)

// TestFloodOfDistinctKeys sends a million distinct keys (a tenth of that
// under the race detector) through a rule whose every decision is a denial,
// over sixteen minutes, so that every minute of the ring fills for both
// kinds, with one key sent 1,000 times among them, evenly spread. The
// limiter samples admitted decisions 1 in 8, as advised, which leaves
// every denial observed. The heap grows by no more than the sketch's
// bound, both totals are exact, and the repeated key is in the top 10 of
// the last 15 minutes with a count within its stated error.
func TestFloodOfDistinctKeys(t *testing.T) {
	n := 1_000_000
	if raceEnabled {
		n = 100_000
	}
	clock := clocktest.New(start)
	// Limit 1, cost 2: every decision is denied (and charges nothing, so
	// the store holds no key).
	l, tops := observedSampled(t, clock, 8, floodgate.Rule{Name: "per-ip", Key: []string{"ip"}, Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute})
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
		if want := int64(n) + 1; r.Total != want { // and the warm-up
			t.Errorf("%s: total %d, want %d", kind, r.Total, want)
		}
		found := false
		for rank, e := range r.Entries {
			if e.Key != "attacker" {
				continue
			}
			found = true
			t.Logf("%s: attacker at rank %d, count %d ± %d (sent %d)", kind, rank+1, e.Count, e.Error, sent)
			if int64(sent) > e.Count || int64(sent) < e.Count-e.Error {
				t.Errorf("%s: attacker sent %d times, reported %d with error %d", kind, sent, e.Count, e.Error)
			}
		}
		if !found {
			t.Errorf("%s: attacker not in the top 10: %v", kind, r.Entries)
		}
	}
}
