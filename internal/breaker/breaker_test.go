package breaker

import (
	"testing"
	"time"
)

// TestTransitions walks a breaker through its states and checks what each
// call reports: the opening failure, the one probe, the closing success.
func TestTransitions(t *testing.T) {
	const s = int64(time.Second)
	b := New(2, time.Second)
	if !b.Allow(0) || b.Failure(0) || b.State() != Closed {
		t.Fatal("one failure of two opened the breaker")
	}
	if !b.Failure(0) || b.State() != Open || b.Failure(0) {
		t.Fatal("the second failure did not report opening the breaker (once)")
	}
	if b.Allow(s-1) || b.RetryIn(s/2) != time.Second/2 {
		t.Fatal("an open breaker let a call through before its cooldown")
	}
	if !b.Allow(s) || b.Allow(s) || b.State() != HalfOpen {
		t.Fatal("after the cooldown, not exactly one probe went through")
	}
	b.Abandon()
	if b.State() != Open || !b.Allow(s) {
		t.Fatal("an abandoned probe did not hand the next call a probe")
	}
	if !b.Failure(s) || b.Allow(3*s-1) {
		t.Fatal("a failed probe did not reopen the breaker for twice the cooldown")
	}
	if !b.Allow(3*s) || !b.Success() || b.State() != Closed || b.Success() {
		t.Fatal("a successful probe did not report closing the breaker (once)")
	}
	b.Abandon()
	if b.State() != Closed {
		t.Fatal("Abandon changed a closed breaker")
	}
	off := New(-1, 0)
	for range 10 {
		if off.Failure(0) || !off.Allow(0) {
			t.Fatal("a disabled breaker opened")
		}
	}
}

// TestProbesBackOff: each failed probe doubles the wait before the next,
// up to MaxCooldown; a successful probe resets it.
func TestProbesBackOff(t *testing.T) {
	const ms = int64(time.Millisecond)
	b := NewWith(Options{Failures: 1, Cooldown: 100 * time.Millisecond, MaxCooldown: 300 * time.Millisecond})
	now := int64(0)
	b.Allow(now)
	b.Failure(now)
	for _, wait := range []int64{100, 200, 300, 300} {
		if b.Allow(now + wait*ms - 1) {
			t.Fatalf("a probe before %dms", wait)
		}
		now += wait * ms
		if !b.Allow(now) {
			t.Fatalf("no probe after %dms", wait)
		}
		b.Failure(now)
	}
	now += 300 * ms
	if !b.Allow(now) || !b.Success() {
		t.Fatal("a successful probe did not close the breaker")
	}
	b.Allow(now)
	b.Failure(now)
	if b.Allow(now+100*ms-1) || !b.Allow(now+100*ms) {
		t.Fatal("the cooldown did not start again at 100ms after a close")
	}
}

// TestRatio: the breaker opens when Failures failures are at least Ratio of
// the window's calls, and not on failures among many successes.
func TestRatio(t *testing.T) {
	const ms = int64(time.Millisecond)
	b := NewWith(Options{Failures: 5, Ratio: 0.5, Window: time.Second})
	now := int64(1_000_000) * ms
	for range 90 { // a busy second's successes
		b.Allow(now)
		b.Success()
		now += 5 * ms
	}
	for i := range 60 { // a stall: 60 calls in flight fail at once
		b.Allow(now)
		if b.Failure(now) {
			t.Fatalf("opened at failure %d, with 90 successes in the window", i+1)
		}
	}
	for i := 0; b.State() == Closed; i++ { // an outage: every call fails
		if i == 200 {
			t.Fatal("an outage did not open the breaker")
		}
		now += 5 * ms
		b.Allow(now)
		b.Failure(now)
	}
	if calls, fails := b.counts(); float64(fails) < 0.5*float64(calls) || fails < 5 {
		t.Errorf("opened with %d failures of %d calls", fails, calls)
	}
}
