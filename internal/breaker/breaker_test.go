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
	if !b.Failure(s) || b.Allow(2*s-1) {
		t.Fatal("a failed probe did not reopen the breaker for a cooldown")
	}
	if !b.Allow(2*s) || !b.Success() || b.State() != Closed || b.Success() {
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
