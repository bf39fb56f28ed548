package floodgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// TestGiveBack: units given back without a ticket return to what each rule
// counts in now, never below nothing held, never into a window that has
// passed, and leave first-hit windows alone.
func TestGiveBack(t *testing.T) {
	ctx := context.Background()
	rules := []floodgate.Rule{
		{Name: "clock", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Align: floodgate.AlignClock, Key: []string{"user"}},
		{Name: "bucket", Algorithm: floodgate.TokenBucket, Limit: 10, Window: time.Hour, Burst: 20, Key: []string{"user"}},
		{Name: "gcra", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Hour, Burst: 20, Key: []string{"user"}},
		{Name: "sliding", Algorithm: floodgate.SlidingWindow, Limit: 10, Window: time.Minute, Buckets: 6, Key: []string{"user"}},
		{Name: "first-hit", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"user"}},
	}
	l, clock := memLimiter(t, rules, nil)
	clock.Set(clock.Now().Truncate(time.Minute)) // a window's start
	remaining := func() map[string]int64 {
		t.Helper()
		out := map[string]int64{}
		for _, r := range peek(t, l, user("u1")).Rules {
			out[r.Name] = r.Remaining
		}
		return out
	}
	want := func(when string, clockW, bucket, gcra, sliding, firstHit int64) {
		t.Helper()
		got := remaining()
		for name, w := range map[string]int64{"clock": clockW, "bucket": bucket, "gcra": gcra, "sliding": sliding, "first-hit": firstHit} {
			if got[name] != w {
				t.Errorf("%s: %s remaining %d, want %d", when, name, got[name], w)
			}
		}
	}
	if d, _ := l.AllowN(ctx, user("u1"), 8); !d.Allowed {
		t.Fatal("8 units refused")
	}
	want("after 8", 2, 12, 12, 2, 2)
	if err := l.GiveBack(ctx, user("u1"), 3); err != nil {
		t.Fatal(err)
	}
	want("3 given back", 5, 15, 15, 5, 2)
	if err := l.GiveBack(ctx, user("u1"), 100); err != nil {
		t.Fatal(err)
	}
	want("100 given back", 10, 20, 20, 10, 2)
	if err := l.GiveBack(ctx, user("u1"), -1); err == nil {
		t.Error("a negative give-back was accepted")
	}

	// A window that has passed is left alone: the next one counts anew.
	if d, _ := l.AllowN(ctx, user("u2"), 10); !d.Allowed {
		t.Fatal("10 units refused")
	}
	clock.Advance(time.Minute)
	if d, _ := l.AllowN(ctx, user("u2"), 4); !d.Allowed {
		t.Fatal("4 units refused in the next window")
	}
	if err := l.GiveBack(ctx, user("u2"), 10); err != nil {
		t.Fatal(err)
	}
	for _, r := range peek(t, l, user("u2")).Rules {
		if r.Name == "clock" && r.Remaining != 10 {
			t.Errorf("the next window after giving back 10 of its 4: remaining %d, want 10", r.Remaining)
		}
	}
}
