package redis

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/rueidis"
)

// TestBroken pins which failures send a call again at once: a connection
// that broke, and not an error reply (the script may have run), an
// unreadable reply, the deadline, a dial that failed (no server there), a
// client closed or without a node for the slot.
func TestBroken(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		{fmt.Errorf("wrapped: %w", io.EOF), true},
		{&net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{&serverError{msg: "ERR Function not found"}, false},
		{&serverError{msg: "ERR Error running script"}, false},
		{&serverError{msg: "TRYAGAIN Multiple keys request during rehashing of slot"}, false},
		{fmt.Errorf("%w of 3 values for 1 batches: too long: <nil>", errReply), false},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{rueidis.ErrClosing, false},
		{rueidis.ErrNoSlot, false},
		{nil, false},
	} {
		if got := broken(context.Background(), tc.err); got != tc.want {
			t.Errorf("broken(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if broken(ctx, io.EOF) {
		t.Error("broken(EOF) after the caller's context ended = true, want false")
	}
}
