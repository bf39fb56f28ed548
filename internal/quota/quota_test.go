package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/internal/quota"
	"github.com/floodgate-go/floodgate/store/memory"
)

func TestFields(t *testing.T) {
	rules := []floodgate.Rule{
		{Name: "a", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Second, Key: []string{"x"},
			Overrides: []floodgate.Override{{Match: floodgate.Attributes{"x": "vip"}, Limit: 50}}},
		{Name: "b", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute, Key: []string{"y"}},
		{Name: "c", Algorithm: floodgate.TokenBucket, Limit: 100, Burst: 200, Window: time.Second, Key: []string{"z"}},
		{Name: "d", Algorithm: floodgate.Concurrency, Limit: 3, Window: time.Minute, Key: []string{"w"}},
	}
	store := memory.New(&memory.Options{SweepInterval: -1})
	defer store.Close()
	lim, err := floodgate.New("api", store, rules, &floodgate.Options{Clock: clocktest.New(time.Unix(1_800_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	f := quota.New(lim)
	for _, tt := range []struct {
		attrs      floodgate.Attributes
		policy, rl string
	}{
		{floodgate.Attributes{"x": "1", "y": "1"}, `"a";q=10;w=1, "b";q=5;w=60`, `"a";r=9;t=1, "b";r=4;t=60`},
		{floodgate.Attributes{"x": "vip", "y": "1"}, `"a";q=50;w=1, "b";q=5;w=60`, `"a";r=49;t=1, "b";r=3;t=60`},
		{floodgate.Attributes{"y": "1"}, `"b";q=5;w=60`, `"b";r=2;t=60`},
		{floodgate.Attributes{"z": "1", "w": "1"}, `"c";q=200;w=2, "d";q=3;qu="concurrent-requests"`, `"c";r=199;t=1, "d";r=2;t=60`},
		{floodgate.Attributes{}, ``, ``},
	} {
		o, err := lim.Decide(context.Background(), floodgate.ModeConsume, tt.attrs, 1)
		if err != nil {
			t.Fatal(err)
		}
		p, rl := f.Fields(o.Rules)
		if p != tt.policy || rl != tt.rl {
			t.Errorf("%v: Fields = %q, %q; want %q, %q", tt.attrs, p, rl, tt.policy, tt.rl)
		}
	}
}

func TestSeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int64
	}{{0, 1}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {90 * time.Second, 90}} {
		if got := quota.Seconds(tt.d); got != tt.want {
			t.Errorf("Seconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}
