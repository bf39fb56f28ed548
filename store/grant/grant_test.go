package grant_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/grant"
)

// admitN asks in's limiter n times on the hot key and returns how many it
// admitted.
func admitN(t *testing.T, in *instance, n int) (admitted int64) {
	t.Helper()
	for range n {
		d := in.lim.AllowKey(context.Background(), "acme")
		if d.Err != nil {
			t.Fatalf("decision failed: %v", d.Err)
		}
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestKilledInstance: an instance that dies holding a grant (never closed,
// its idle return off) strands that grant and nothing more, until its
// window ends; the next window is whole.
func TestKilledInstance(t *testing.T) {
	srv := redistest.Start(t)
	clock := clocktest.New(time.Now().Truncate(time.Second))
	killed := newInstance(t, srv, hotFixed, &grant.Options{Idle: -1}, clock)
	if got := admitN(t, killed, 1); got != 1 {
		t.Fatal("the first decision was denied")
	}
	held := killed.grant.Stats().Granted - 1
	if held <= 0 || held > hotLimit/grant.DefaultShare {
		t.Fatalf("the killed instance holds %d units, want 1 to limit/Share", held)
	}
	other := newInstance(t, srv, hotFixed, nil, clock)
	t.Cleanup(func() { other.grant.Close() })
	if got, want := admitN(t, other, 2*hotLimit), hotLimit-1-held; got != want {
		t.Errorf("the other instance admitted %d in the window, want the limit less the dead grant and its spent unit, %d", got, want)
	}
	clock.Advance(time.Second)
	if got := admitN(t, other, 2*hotLimit); got != hotLimit {
		t.Errorf("the other instance admitted %d in the next window, want all %d", got, hotLimit)
	}
}

// TestClosedInstance: an instance that closes gives its grant back, and
// another admits the whole limit.
func TestClosedInstance(t *testing.T) {
	srv := redistest.Start(t)
	clock := clocktest.New(time.Now().Truncate(time.Second))
	first := newInstance(t, srv, hotFixed, &grant.Options{Idle: -1}, clock)
	admitN(t, first, 10)
	first.grant.Close()
	if st := first.grant.Stats(); st.Returned != st.Granted-10 {
		t.Errorf("closed with %+v: want every unspent unit returned", st)
	}
	other := newInstance(t, srv, hotFixed, nil, clock)
	t.Cleanup(func() { other.grant.Close() })
	if got, want := admitN(t, other, 2*hotLimit), int64(hotLimit-10); got != want {
		t.Errorf("the other instance admitted %d, want %d", got, want)
	}
}

// TestIdleReturn: a grant left unused for Idle goes back on its own.
func TestIdleReturn(t *testing.T) {
	srv := redistest.Start(t)
	in := newInstance(t, srv, hotFixed, &grant.Options{Idle: 20 * time.Millisecond}, nil)
	t.Cleanup(func() { in.grant.Close() })
	admitN(t, in, 1)
	deadline := time.Now().Add(2 * time.Second)
	for {
		st := in.grant.Stats()
		if st.Returned+st.Stranded == st.Granted-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an idle grant was not given back: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStoreDown: while Redis is unreachable a live grant keeps answering
// until it is spent; then decisions fail as the store's do.
func TestStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	clock := clocktest.New(time.Now().Truncate(time.Second))
	in := newInstance(t, srv, hotFixed, &grant.Options{Idle: -1}, clock)
	admitN(t, in, 1)
	held := in.grant.Stats().Granted - 1
	srv.Kill()
	ctx := context.Background()
	for i := range held {
		if d := in.lim.AllowKey(ctx, "acme"); !d.Allowed || d.Err != nil {
			t.Fatalf("decision %d of the live grant of %d: %+v", i, held, d)
		}
	}
	if d := in.lim.AllowKey(ctx, "acme"); d.Err == nil {
		t.Errorf("a decision past the grant did not fail with Redis down: %+v", d)
	}
}

// TestRefundLocal: a locally answered decision's refund gives its units
// back to the window, once.
func TestRefundLocal(t *testing.T) {
	srv := redistest.Start(t)
	clock := clocktest.New(time.Now().Truncate(time.Second))
	in := newInstance(t, srv, hotFixed, &grant.Options{Idle: -1}, clock)
	t.Cleanup(func() { in.grant.Close() })
	ctx := context.Background()
	attrs := floodgate.Attributes{"tenant": "acme"}
	admitN(t, in, 1)
	o, err := in.lim.Decide(ctx, floodgate.ModeConsume, attrs, 100)
	if err != nil || !o.Allowed {
		t.Fatalf("consume of 100: %+v, %v", o.Decision, err)
	}
	if in.grant.Stats().Local == 0 {
		t.Fatal("the consume was not answered from the grant")
	}
	for range 2 {
		if err := in.lim.Refund(ctx, o.Ticket()); err != nil {
			t.Fatal(err)
		}
	}
	d, err := in.lim.Peek(ctx, attrs, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Remaining, int64(hotLimit-1); got != want {
		t.Errorf("remaining after the refund: %d, want %d", got, want)
	}
}
