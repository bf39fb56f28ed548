package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/redis/rueidis"
)

// TestElsewhere pins which errors name a node other than the one the
// store's slot map holds for the call.
func TestElsewhere(t *testing.T) {
	dial := func(addr string) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr)), Err: errors.New("connection refused")}
	}
	for _, tc := range []struct {
		err  error
		addr string
		want bool
	}{
		{dial("127.0.0.1:7001"), "127.0.0.1:7002", true},
		{fmt.Errorf("wrapped: %w", dial("127.0.0.1:7001")), "127.0.0.1:7002", true},
		{dial("127.0.0.1:7001"), "127.0.0.2:7001", true},
		{dial("127.0.0.1:7001"), "127.0.0.1:7001", false},
		{dial("[::ffff:127.0.0.1]:7001"), "127.0.0.1:7001", false},
		{dial("[::1]:7001"), "[::1]:7001", false},
		{dial("127.0.0.1:7001"), "redis-1:7001", false}, // a host name: not compared
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("reset")}, "127.0.0.1:7002", false},
		{context.DeadlineExceeded, "127.0.0.1:7002", false},
		{nil, "127.0.0.1:7002", false},
	} {
		if got := elsewhere(tc.err, tc.addr); got != tc.want {
			t.Errorf("elsewhere(%v, %s) = %v, want %v", tc.err, tc.addr, got, tc.want)
		}
	}
}

// TestElsewhereRueidisDialError checks that rueidis reports a refused
// connection as an error naming the address it dialled, which elsewhere
// reads.
func TestElsewhereRueidisDialError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
	if err == nil {
		t.Fatal("rueidis connected to a closed port")
	}
	if elsewhere(err, addr) {
		t.Errorf("elsewhere(%v, %s) = true, want false: it is that node's error", err, addr)
	}
	if !elsewhere(err, "127.0.0.1:1") {
		t.Errorf("elsewhere(%v, 127.0.0.1:1) = false, want true", err)
	}
}

// TestRecordElsewhere checks that a call rueidis sent to another node
// than the slot's master in the store's map (its map being older, after
// a failover) is no failure of that master, whose breaker stays closed;
// the same errors from the master itself open it.
func TestRecordElsewhere(t *testing.T) {
	const heir, lost = "127.0.0.1:7002", "127.0.0.1:7001"
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(lost)), Err: errors.New("connection refused")}
	for _, tc := range []struct {
		node     string
		wantOpen bool
	}{
		{heir, false},
		{lost, true},
	} {
		n := newNodes(nil, store.BreakerOptions{}, slog.New(slog.DiscardHandler))
		n.next.Store(time.Now().Add(time.Hour).UnixNano()) // no slot-map read
		nd := n.get(tc.node)
		now := time.Now().UnixNano()
		for range 20 {
			g := &group{node: nd}
			g.c.err = refused
			n.record(context.Background(), g, now)
		}
		if open := !nd.br.Allow(now); open != tc.wantOpen {
			t.Errorf("%s's breaker after 20 calls refused by %s: open %v, want %v", tc.node, lost, open, tc.wantOpen)
		}
	}
}
