package redis

import (
	"context"
	"fmt"
	"testing"
)

// TestMovingReplies pins which replies mean that Redis refused a call
// before running it, so that it is sent again: only those it gives while
// routing the command. An ERR may come from a script that has run part of
// its commands, CLUSTERDOWN from a master that is lost, a deadline from a
// call that may have run: none is sent again.
func TestMovingReplies(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&serverError{msg: "TRYAGAIN Multiple keys request during rehashing of slot"}, true},
		{&serverError{msg: "LOADING Redis is loading the dataset in memory"}, true},
		{&serverError{msg: "ASK 3999 127.0.0.1:6381"}, true},
		{&serverError{msg: "MOVED 3999 127.0.0.1:6381"}, true},
		{fmt.Errorf("wrapped: %w", &serverError{msg: "TRYAGAIN Multiple keys"}), true},
		{&serverError{msg: "ERR Script attempted to access a non local key in a cluster node"}, false},
		{&serverError{msg: "CLUSTERDOWN The cluster is down"}, false},
		{&serverError{msg: "ERR Function not found"}, false}, // loaded and sent again (see exec)
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := moving(tc.err); got != tc.want {
			t.Errorf("moving(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
