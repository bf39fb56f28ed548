package share_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/share"
)

// Each of four instances admits a quarter of the limit, and the decision
// reports the rule's limit as configured.
func TestEachInstanceAdmitsItsShare(t *testing.T) {
	mem := memory.New(&memory.Options{SweepInterval: -1})
	defer mem.Close()
	s, err := share.New(mem, 4)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	l, err := floodgate.New("api", s, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"user"}},
		{Name: "burst", Algorithm: floodgate.TokenBucket, Limit: 100, Burst: 40, Window: time.Minute, Key: []string{"user"}},
	}, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	var last floodgate.Decision
	for range 20 {
		if d := l.AllowKey(context.Background(), "ann"); d.Allowed {
			admitted++
		} else {
			last = d
		}
	}
	if admitted != 2 { // 10/4, rounded down
		t.Errorf("admitted %d of 20, want 2 (a quarter of 10, rounded down)", admitted)
	}
	if last.Rule != "per-user" || last.Limit != 10 {
		t.Errorf("denial reports rule %q limit %d, want per-user and the configured 10", last.Rule, last.Limit)
	}
}

// A limit below the instance count still admits one unit per instance.
func TestShareIsAtLeastOne(t *testing.T) {
	mem := memory.New(&memory.Options{SweepInterval: -1})
	defer mem.Close()
	s, _ := share.New(mem, 8)
	l, _ := floodgate.New("api", s, []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.GCRA, Limit: 3, Window: time.Minute, Key: []string{"user"}},
	}, &floodgate.Options{Clock: clocktest.New(time.Unix(1_700_000_000, 0))})
	if d := l.AllowKey(context.Background(), "ann"); !d.Allowed {
		t.Fatalf("first request denied: %+v", d)
	}
	if d := l.AllowKey(context.Background(), "ann"); d.Allowed {
		t.Fatal("second request admitted: the share of 3 among 8 is 1")
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	if _, err := share.New(nil, 2); err == nil {
		t.Error("nil inner store accepted")
	}
	if _, err := share.New(memory.New(nil), 0); err == nil {
		t.Error("0 instances accepted")
	}
}

// errStore fails every batch.
type errStore struct{}

var errDown = errors.New("down")

func (errStore) Apply(context.Context, *store.Batch) error { return errDown }

// The limiter decides on the fallback while the store fails, and the
// fallback's limits are the instance's share.
func TestLimiterFallsBack(t *testing.T) {
	mem := memory.New(&memory.Options{SweepInterval: -1})
	defer mem.Close()
	fb, _ := share.New(mem, 2)
	guarded, err := guard.New(errStore{}, &guard.Options{Fallback: fb})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New("api", guarded, []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 6, Window: time.Minute, Key: []string{"user"}},
	}, &floodgate.Options{FailurePolicy: floodgate.FailClosed,
		Clock: clocktest.New(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 10 {
		d := l.AllowKey(context.Background(), "ann")
		if d.Reason == floodgate.ReasonStore {
			t.Fatalf("decided by the failure policy with a fallback set: %+v", d)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("admitted %d on the fallback, want 3 (half of 6)", admitted)
	}
}

// Four instances share a limiter's limits while Redis is down: each decides
// on its own memory store with a quarter of every limit.
func ExampleNew() {
	mem := memory.New(nil)
	defer mem.Close()
	fallback, err := share.New(mem, 4)
	if err != nil {
		panic(err)
	}
	redisStore := errStore{} // a Redis store that cannot answer
	guarded, err := guard.New(redisStore, &guard.Options{Fallback: fallback})
	if err != nil {
		panic(err)
	}
	l, err := floodgate.New("api", guarded, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 8, Window: time.Minute, Key: []string{"user"}},
	}, nil)
	if err != nil {
		panic(err)
	}
	for range 3 {
		d := l.AllowKey(context.Background(), "ann")
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}
