package topkeys_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/topkeys"
)

var start = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// observed returns a limiter whose decisions a fresh Tracker observes,
// both on clock, counting every decision (no sampling) unless sample says
// otherwise.
func observed(t testing.TB, clock floodgate.Clock, rules ...floodgate.Rule) (*floodgate.Limiter, *topkeys.Tracker) {
	return observedSampled(t, clock, 1, rules...)
}

func observedSampled(t testing.TB, clock floodgate.Clock, sample int, rules ...floodgate.Rule) (*floodgate.Limiter, *topkeys.Tracker) {
	t.Helper()
	tops := topkeys.New(&topkeys.Options{Clock: clock})
	st := memory.New(&memory.Options{MaxKeys: 10_000, SweepInterval: -1})
	t.Cleanup(func() { st.Close() })
	l, err := floodgate.New("api", st, rules, &floodgate.Options{Clock: clock, Observer: tops.Observe, ObserveSample: sample})
	if err != nil {
		t.Fatal(err)
	}
	return l, tops
}

func top(t testing.TB, tops *topkeys.Tracker, rule string, kind topkeys.Kind, span time.Duration, n int) topkeys.Report {
	t.Helper()
	r, err := tops.Top("api", rule, kind, span, n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestTopCountsDenialsAndDecisionsPerRule(t *testing.T) {
	clock := clocktest.New(start)
	l, tops := observed(t, clock,
		floodgate.Rule{Name: "per-user", Key: []string{"user"}, Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Hour},
		floodgate.Rule{Name: "per-org", Key: []string{"org"}, Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Hour})
	ctx := context.Background()
	send := func(user string, n int) {
		for range n {
			l.Allow(ctx, floodgate.Attributes{"user": user, "org": "acme"})
		}
	}
	send("alice", 10) // 3 admitted, 7 denied by per-user
	send("bob", 5)    // 3 admitted, 2 denied
	send("carol", 1)

	got := top(t, tops, "per-user", topkeys.Denials, time.Minute, 10)
	want := []topkeys.Entry{{Key: "alice", Count: 7}, {Key: "bob", Count: 2}}
	if fmt.Sprint(got.Entries) != fmt.Sprint(want) || got.Total != 9 {
		t.Errorf("per-user denials = %v (total %d), want %v (total 9)", got.Entries, got.Total, want)
	}
	got = top(t, tops, "per-user", topkeys.Decisions, time.Minute, 2)
	want = []topkeys.Entry{{Key: "alice", Count: 10}, {Key: "bob", Count: 5}}
	if fmt.Sprint(got.Entries) != fmt.Sprint(want) || got.Total != 16 {
		t.Errorf("per-user decisions = %v (total %d), want %v (total 16)", got.Entries, got.Total, want)
	}
	// per-org admitted everything it decided; it never denied.
	if got := top(t, tops, "per-org", topkeys.Denials, time.Minute, 10); len(got.Entries) != 0 {
		t.Errorf("per-org denials = %v, want none", got.Entries)
	}
	got = top(t, tops, "per-org", topkeys.Decisions, time.Minute, 10)
	if want := []topkeys.Entry{{Key: "acme", Count: 16}}; fmt.Sprint(got.Entries) != fmt.Sprint(want) {
		t.Errorf("per-org decisions = %v, want %v", got.Entries, want)
	}
	if got := top(t, tops, "no-such-rule", topkeys.Denials, time.Minute, 10); len(got.Entries) != 0 || got.Total != 0 {
		t.Errorf("unknown rule: %+v, want an empty report", got)
	}
}

func TestShadowRuleDenialsAndStoreFailures(t *testing.T) {
	clock := clocktest.New(start)
	l, tops := observed(t, clock,
		floodgate.Rule{Name: "dark", Key: []string{"user"}, Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Shadow: true})
	ctx := context.Background()
	for range 4 {
		if d := l.Allow(ctx, floodgate.Attributes{"user": "u"}); !d.Allowed {
			t.Fatal("a shadow rule denied")
		}
	}
	got := top(t, tops, "dark", topkeys.Denials, time.Minute, 10)
	if want := []topkeys.Entry{{Key: "u", Count: 3}}; fmt.Sprint(got.Entries) != fmt.Sprint(want) {
		t.Errorf("shadow denials = %v, want %v (would-be denials count)", got.Entries, want)
	}

	// A failing store's fail-closed denials are not a rule's denials.
	tops = topkeys.New(&topkeys.Options{Clock: clock})
	l, err := floodgate.New("api", failing{}, []floodgate.Rule{{Name: "r", Key: []string{"user"}, Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second}},
		&floodgate.Options{Clock: clock, Observer: tops.Observe, FailurePolicy: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	if d := l.Allow(ctx, floodgate.Attributes{"user": "u"}); d.Allowed || d.Reason != floodgate.ReasonStore {
		t.Fatalf("decision %+v, want a fail-closed denial", d)
	}
	if got := top(t, tops, "r", topkeys.Denials, time.Minute, 10); len(got.Entries) != 0 {
		t.Errorf("store failure counted as denials: %v", got.Entries)
	}
	if got := top(t, tops, "r", topkeys.Decisions, time.Minute, 10); len(got.Entries) != 1 || got.Entries[0].Count != 1 {
		t.Errorf("decisions = %v, want u once", got.Entries)
	}
}

// failing is a store whose every call fails.
type failing struct{}

func (failing) Apply(context.Context, *store.Batch) error { return errors.New("down") }

func TestSpansRollOverMinutes(t *testing.T) {
	clock := clocktest.New(start)
	tops := topkeys.New(&topkeys.Options{Clock: clock})
	add := func(key string, n int) {
		for range n {
			tops.Add("api", "r", key, true)
		}
	}
	add("early", 5) // 12:00
	clock.Advance(3 * time.Minute)
	add("late", 2) // 12:03
	for _, tc := range []struct {
		span time.Duration
		want string
	}{
		{time.Minute, "[{late 2 0}]"}, // 12:02 and 12:03
		{90 * time.Second, "[{late 2 0}]"},
		{3 * time.Minute, "[{early 5 0} {late 2 0}]"}, // 12:00 to 12:03
		{15 * time.Minute, "[{early 5 0} {late 2 0}]"},
	} {
		r := top(t, tops, "r", topkeys.Denials, tc.span, 10)
		if got := fmt.Sprint(r.Entries); got != tc.want {
			t.Errorf("span %v: %s, want %s", tc.span, got, tc.want)
		}
	}
	r := top(t, tops, "r", topkeys.Denials, 5*time.Minute, 10)
	if want := start.Add(-2 * time.Minute); !r.Since.Equal(want) {
		t.Errorf("Since = %v, want %v", r.Since, want)
	}
	// 16 minutes on, every minute of the ring has been reused or is stale.
	clock.Advance(16 * time.Minute)
	add("now", 1)
	if r := top(t, tops, "r", topkeys.Denials, 15*time.Minute, 10); fmt.Sprint(r.Entries) != "[{now 1 0}]" || r.Total != 1 {
		t.Errorf("after 16 minutes: %v (total %d), want only now", r.Entries, r.Total)
	}
	for _, span := range []time.Duration{0, -time.Minute, 16 * time.Minute} {
		if _, err := tops.Top("api", "r", topkeys.Denials, span, 10); !errors.Is(err, topkeys.ErrSpan) {
			t.Errorf("span %v: err %v, want ErrSpan", span, err)
		}
	}
}

func TestLongKeysAreBounded(t *testing.T) {
	tops := topkeys.New(&topkeys.Options{Clock: clocktest.New(start)})
	long := strings.Repeat("x", 10_000)
	tops.Add("api", "r", long, true)
	tops.Add("api", "r", long, true)
	tops.Add("api", "r", long+"y", true)
	r := top(t, tops, "r", topkeys.Denials, time.Minute, 10)
	if len(r.Entries) != 2 || r.Entries[0].Count != 2 || r.Entries[1].Count != 1 {
		t.Fatalf("entries %v, want the two long keys apart", r.Entries)
	}
	for _, e := range r.Entries {
		if len(e.Key) != topkeys.MaxKeyLen || !strings.HasPrefix(e.Key, "xxxx") {
			t.Errorf("kept key of %d bytes (%.20q...), want %d", len(e.Key), e.Key, topkeys.MaxKeyLen)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	tops := topkeys.New(&topkeys.Options{Capacity: 16})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				tops.Add(fmt.Sprint("l", g%2), "r", fmt.Sprint("k", i%50), i%3 == 0)
				if i%100 == 0 {
					if _, err := tops.Top("l0", "r", topkeys.Decisions, time.Minute, 5); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for _, l := range []string{"l0", "l1"} {
		r, _ := tops.Top(l, "r", topkeys.Decisions, 2*time.Minute, 5)
		total += r.Total
	}
	if total != 8000 {
		t.Errorf("total decisions %d, want 8000", total)
	}
}

func TestCountOfAnyKey(t *testing.T) {
	tops := topkeys.New(&topkeys.Options{Clock: clocktest.New(start)})
	for range 3 {
		tops.Add("api", "r", "a", false)
	}
	tops.Add("api", "r", "a", true)
	for _, tc := range []struct {
		kind topkeys.Kind
		key  string
		want topkeys.Entry
	}{
		{topkeys.Decisions, "a", topkeys.Entry{Key: "a", Count: 4}},
		{topkeys.Denials, "a", topkeys.Entry{Key: "a", Count: 1}},
		{topkeys.Denials, "b", topkeys.Entry{Key: "b"}},
	} {
		got, err := tops.Count("api", "r", tc.kind, time.Minute, tc.key)
		if err != nil || got != tc.want {
			t.Errorf("Count(%s, %s) = %+v, %v; want %+v", tc.kind, tc.key, got, err, tc.want)
		}
	}
}

func TestEpochClock(t *testing.T) {
	tops := topkeys.New(&topkeys.Options{Clock: new(clocktest.Manual)})
	tops.Add("api", "r", "a", true)
	if r := top(t, tops, "r", topkeys.Denials, 15*time.Minute, 1); len(r.Entries) != 1 {
		t.Errorf("entries %v, want a", r.Entries)
	}
}

// TestSampledDecisions: on a limiter that tells the Tracker of 1 in 8
// admitted decisions, the key that sends half the decisions leads with a
// count within its stated error, the total is within six standard
// deviations of the sampling, and denials are all counted.
func TestSampledDecisions(t *testing.T) {
	clock := clocktest.New(start)
	// heavy sends 10,000 and is denied its last 2,000; k0..k999 send 10
	// each, all admitted.
	l, tops := observedSampled(t, clock, 8, floodgate.Rule{Name: "r", Key: []string{"user"}, Algorithm: floodgate.FixedWindow, Limit: 8000, Window: time.Hour})
	ctx := context.Background()
	for i := range 20_000 {
		key := "heavy"
		if i%2 == 1 {
			key = fmt.Sprint("k", i%1000)
		}
		if d := l.AllowKey(ctx, key); d.Allowed != (key != "heavy" || i < 16_000) {
			t.Fatalf("decision %d for %s: %+v", i, key, d)
		}
	}
	r := top(t, tops, "r", topkeys.Decisions, time.Minute, 3)
	if len(r.Entries) == 0 || r.Entries[0].Key != "heavy" {
		t.Fatalf("decisions top %v, want heavy first", r.Entries)
	}
	if e := r.Entries[0]; e.Count-e.Error > 10_000 || e.Count+e.Error < 10_000 || e.Error > 2_000 {
		t.Errorf("heavy: %d ± %d, want 10000 within a small error", e.Count, e.Error)
	}
	// 18,000 admitted decisions sampled 1 in 8: one standard deviation
	// is √(18000·7) ≈ 355.
	if r.Total < 20_000-6*355 || r.Total > 20_000+6*355 {
		t.Errorf("total decisions %d, want 20000 ± %d", r.Total, 6*355)
	}
	d := top(t, tops, "r", topkeys.Denials, time.Minute, 3)
	if fmt.Sprint(d.Entries) != "[{heavy 2000 0}]" || d.Total != 2000 {
		t.Errorf("denials %v (total %d), want heavy exactly 2000", d.Entries, d.Total)
	}
}

func TestRetain(t *testing.T) {
	tops := topkeys.New(&topkeys.Options{Clock: clocktest.New(start)})
	for _, lr := range [][2]string{{"a", "r1"}, {"a", "r2"}, {"b", "r1"}} {
		tops.Add(lr[0], lr[1], "k", true)
	}
	tops.Retain(func(limiter, rule string) bool { return limiter == "a" && rule == "r2" })
	for _, tc := range []struct {
		limiter, rule string
		want          int
	}{{"a", "r1", 0}, {"a", "r2", 1}, {"b", "r1", 0}} {
		r, _ := tops.Top(tc.limiter, tc.rule, topkeys.Denials, time.Minute, 10)
		if len(r.Entries) != tc.want {
			t.Errorf("%s/%s after Retain: %v, want %d keys", tc.limiter, tc.rule, r.Entries, tc.want)
		}
	}
	tops.Add("b", "r1", "k", true) // a forgotten rule starts afresh
	if r, _ := tops.Top("b", "r1", topkeys.Denials, time.Minute, 10); fmt.Sprint(r.Entries) != "[{k 1 0}]" {
		t.Errorf("b/r1 again: %v", r.Entries)
	}
}

// TestObserveCountsEachRule tells a Tracker of decisions made with Decide
// over rules that admit, deny, shadow-deny and peek, and a store that
// fails, and wants its reports to hold, for each rule and key, the
// decisions and denials the Outcomes say (unsampled: exact).
func TestObserveCountsEachRule(t *testing.T) {
	clock := clocktest.New(start)
	ctx := context.Background()
	tops := topkeys.New(&topkeys.Options{Clock: clock})
	opts := func(policy floodgate.FailurePolicy) *floodgate.Options {
		return &floodgate.Options{Clock: clock, Observer: tops.Observe, FailurePolicy: policy}
	}
	st := memory.New(&memory.Options{SweepInterval: -1})
	t.Cleanup(func() { st.Close() })
	l, err := floodgate.New("api", st, []floodgate.Rule{
		{Name: "per-user", Key: []string{"user"}, Algorithm: floodgate.FixedWindow, Limit: 20, Window: time.Hour},
		{Name: "per-org", Key: []string{"org"}, Algorithm: floodgate.TokenBucket, Limit: 300, Window: time.Hour},
		{Name: "dark", Key: []string{"user"}, Algorithm: floodgate.GCRA, Limit: 5, Window: time.Hour, Shadow: true},
	}, opts(floodgate.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	down, err := floodgate.New("down", failing{}, []floodgate.Rule{{Name: "r", Key: []string{"user"}, Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second}}, opts(floodgate.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	type count struct{ decisions, denials int64 }
	want := map[[3]string]*count{} // by limiter, rule, key
	for i := range 2_000 {
		attrs := floodgate.Attributes{"user": fmt.Sprint("u", i%37), "org": fmt.Sprint("o", i%3)}
		lim, mode := l, floodgate.ModeConsume
		switch i % 10 {
		case 0:
			mode = floodgate.ModePeek
		case 1:
			mode = floodgate.ModeRecord
		case 2:
			lim = down
		}
		o, err := lim.Decide(ctx, mode, attrs, 1)
		if err != nil {
			t.Fatal(err)
		}
		if mode != floodgate.ModeRecord {
			for _, r := range o.Rules {
				k := [3]string{lim.Name(), r.Name, r.Key}
				if want[k] == nil {
					want[k] = &count{}
				}
				want[k].decisions++
				if !r.Allowed && o.Reason != floodgate.ReasonStore {
					want[k].denials++
				}
			}
		}
		if i%500 == 499 {
			clock.Advance(time.Minute)
		}
	}
	for _, lr := range [][2]string{{"api", "per-user"}, {"api", "per-org"}, {"api", "dark"}, {"down", "r"}} {
		for _, kind := range []topkeys.Kind{topkeys.Denials, topkeys.Decisions} {
			r, err := tops.Top(lr[0], lr[1], kind, 10*time.Minute, 100)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, e := range r.Entries {
				got[e.Key] = e.Count
			}
			for k, c := range want {
				if k[0] != lr[0] || k[1] != lr[1] {
					continue
				}
				w := c.decisions
				if kind == topkeys.Denials {
					w = c.denials
				}
				if got[k[2]] != w {
					t.Errorf("%s/%s %v of %s: %d, want the Outcomes' %d", lr[0], lr[1], kind, k[2], got[k[2]], w)
				}
			}
			if kind == topkeys.Decisions && r.Total == 0 {
				t.Errorf("%s/%s: no decision counted", lr[0], lr[1])
			}
		}
	}
}

// TestConcurrentObserve runs a Tracker as the Observer of a limiter
// deciding from four goroutines on the system clock, over fixed
// windows of 20 ms that turn while it runs, and wants every decision
// counted, and as denials exactly those the limiter returned denied.
func TestConcurrentObserve(t *testing.T) {
	tops := topkeys.New(nil)
	st := memory.New(nil)
	t.Cleanup(func() { st.Close() })
	l, err := floodgate.New("api", st, []floodgate.Rule{
		{Name: "per-user", Key: []string{"user"}, Algorithm: floodgate.FixedWindow, Align: floodgate.AlignClock, Limit: 5, Window: 20 * time.Millisecond},
	}, &floodgate.Options{Observer: tops.Observe})
	if err != nil {
		t.Fatal(err)
	}
	var denied atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				if !l.AllowKey(context.Background(), fmt.Sprint("k", (g+i)%10)).Allowed {
					denied.Add(1)
				}
				if i%100 == 0 { // 20 ms of sleep at least: a window turns
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	d := top(t, tops, "per-user", topkeys.Decisions, 2*time.Minute, 10)
	n := top(t, tops, "per-user", topkeys.Denials, 2*time.Minute, 10)
	if d.Total != 8000 || n.Total != denied.Load() {
		t.Errorf("counted %d decisions and %d denials, want 8000 and the %d returned", d.Total, n.Total, denied.Load())
	}
	// One window admits 10 keys × 5; more says a window turned.
	if admitted := 8000 - denied.Load(); denied.Load() == 0 || admitted <= 50 {
		t.Errorf("%d of 8000 admitted: the windows were not both used up and renewed", admitted)
	}
}
