package grpclimit

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// TestAllocations pins what an admitted unary call allocates in the
// interceptor without quota metadata on a one-rule limiter: the key, the
// peer's address as text (clientip), and nothing else. The Admission stays
// on the stack unless a settling closure needs it (each takes its own
// copy; without them this is 2), and the attributes map is pooled.
func TestAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items, so pooled paths allocate")
	}
	lim, _, _ := newLimiter(t, []floodgate.Rule{{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 1 << 40, Window: time.Hour, Key: []string{"ip"}}})
	in := mustNew(t, lim, &Options{Attributes: map[string]KeyFunc{"ip": PeerIP(nil)}, OmitQuotaMetadata: true})
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}})
	info := &grpc.UnaryServerInfo{FullMethod: "/svc.M"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	unary := in.Unary()
	unary(ctx, nil, info, handler) // the key exists before counting
	if got := testing.AllocsPerRun(200, func() { unary(ctx, nil, info, handler) }); got != 1 {
		t.Errorf("%v allocs per call, want 1", got)
	}
}
