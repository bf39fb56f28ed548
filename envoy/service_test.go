package envoy_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoy"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// t0 is 30s into a minute and 810s into an hour since the Unix epoch.
var t0 = time.Unix(1_700_000_010, 0)

type harness struct {
	t      *testing.T
	clock  *clocktest.Manual
	svc    *envoy.Service
	client rlsv3.RateLimitServiceClient
}

// start serves a Service on a loopback port and dials it with Envoy's
// generated client.
func start(t *testing.T, cfg *envoy.Config, store store.Store, opts *envoy.Options) *harness {
	t.Helper()
	h := &harness{t: t, clock: clocktest.New(t0)}
	if opts == nil {
		opts = &envoy.Options{}
	}
	opts.Limiter.Clock = h.clock
	if store == nil {
		mem := memory.New(&memory.Options{SweepInterval: -1})
		t.Cleanup(func() { mem.Close() })
		store = mem
	}
	svc, err := envoy.New(store, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.svc = svc
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.client = rlsv3.NewRateLimitServiceClient(conn)
	return h
}

func loadEdge(t *testing.T) *envoy.Config {
	t.Helper()
	cfg, err := envoy.LoadDir("testdata/edge")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (h *harness) ask(domain string, hits uint32, descs ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	h.t.Helper()
	resp, err := h.client.ShouldRateLimit(context.Background(),
		&rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hits})
	if err != nil {
		h.t.Fatalf("ShouldRateLimit: %v", err)
	}
	if got, want := len(resp.Statuses), len(descs); got != want {
		h.t.Fatalf("%d statuses for %d descriptors", got, want)
	}
	return resp
}

// want is the expected status of one descriptor; limit 0 means no
// current_limit.
type want struct {
	code      rlsv3.RateLimitResponse_Code
	limit     uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
	reset     time.Duration
}

func (h *harness) check(resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, wants ...want) {
	h.t.Helper()
	if resp.OverallCode != overall {
		h.t.Errorf("overall_code = %v, want %v", resp.OverallCode, overall)
	}
	for i, w := range wants {
		s := resp.Statuses[i]
		if s.Code != w.code {
			h.t.Errorf("status[%d].code = %v, want %v", i, s.Code, w.code)
		}
		if s.LimitRemaining != w.remaining {
			h.t.Errorf("status[%d].limit_remaining = %d, want %d", i, s.LimitRemaining, w.remaining)
		}
		if w.limit == 0 && w.unit == 0 {
			if s.CurrentLimit != nil {
				h.t.Errorf("status[%d].current_limit = %v, want none", i, s.CurrentLimit)
			}
			continue
		}
		if s.CurrentLimit == nil {
			h.t.Errorf("status[%d].current_limit missing", i)
			continue
		}
		if s.CurrentLimit.RequestsPerUnit != w.limit || s.CurrentLimit.Unit != w.unit {
			h.t.Errorf("status[%d].current_limit = %d/%v, want %d/%v", i,
				s.CurrentLimit.RequestsPerUnit, s.CurrentLimit.Unit, w.limit, w.unit)
		}
		if got := s.DurationUntilReset.AsDuration(); got != w.reset {
			h.t.Errorf("status[%d].duration_until_reset = %v, want %v", i, got, w.reset)
		}
	}
}

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
)

func TestPerValueCounters(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	for _, rem := range []uint32{2, 1, 0} {
		h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), ok, want{ok, 3, minute, rem, 30 * time.Second})
	}
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), over, want{over, 3, minute, 0, 30 * time.Second})
	// Another value has a counter of its own.
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.2")), ok, want{ok, 3, minute, 2, 30 * time.Second})
	// The more specific value wins: 0 per second refuses everything.
	h.check(h.ask("edge", 0, desc("remote_address", "50.0.0.5")), over, want{over, 0, second, 0, time.Second})
}

func TestEpochAlignedWindows(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	h.clock.Set(t0.Add(29*time.Second + 500*time.Millisecond)) // 0.5s before the minute rolls
	for range 3 {
		h.ask("edge", 0, desc("remote_address", "10.0.0.1"))
	}
	// duration_until_reset is in whole seconds, rounded up, as the
	// reference service answers it: 60 - 59 = 1.
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), over, want{over, 3, minute, 0, time.Second})
	h.clock.Advance(500 * time.Millisecond) // the minute rolls for every key at once
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), ok, want{ok, 3, minute, 2, time.Minute})
	// unit_multiplier: windows of 10s aligned to the epoch.
	resp := h.ask("edge", 0, desc("batch", "x"))
	h.check(resp, ok, want{ok, 4, second, 3, 10 * time.Second})
	if got := resp.Statuses[0].CurrentLimit.GetUnitMultiplier().GetValue(); got != 10 {
		t.Errorf("unit_multiplier = %d, want 10", got)
	}
	h.clock.Advance(2500 * time.Millisecond)
	h.check(h.ask("edge", 0, desc("batch", "x")), ok, want{ok, 4, second, 2, 8 * time.Second})
}

// duration_until_reset is the reference service's: the window's length
// less the whole seconds elapsed in it (Envoy reads its seconds only).
func TestResetInWholeSeconds(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	for _, at := range []time.Duration{0, 1, 999 * time.Millisecond, time.Second, 29*time.Second + 1, 29*time.Second + 999*time.Millisecond, 30 * time.Second} {
		now := t0.Add(at)
		h.clock.Set(now)
		for _, tc := range []struct {
			d    *commonv3.RateLimitDescriptor
			unit int64
		}{{desc("remote_address", "10.9.9.9"), 60}, {desc("tenant", "t", "user", "u"), 3600}, {desc("shadowed", "s"), 1}} {
			resp := h.ask("edge", 0, tc.d)
			got := resp.Statuses[0].DurationUntilReset
			want := tc.unit - now.Unix()%tc.unit
			if got.GetSeconds() != want || got.GetNanos() != 0 {
				t.Errorf("at t0+%v, %d s windows: duration_until_reset = %v, want %ds", at, tc.unit, got.AsDuration(), want)
			}
		}
	}
}

func TestWildcards(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	h.check(h.ask("edge", 0, desc("path", "/api/a")), ok, want{ok, 2, minute, 1, 30 * time.Second})
	h.check(h.ask("edge", 0, desc("path", "/api/a")), ok, want{ok, 2, minute, 0, 30 * time.Second})
	h.check(h.ask("edge", 0, desc("path", "/api/a")), over, want{over, 2, minute, 0, 30 * time.Second})
	h.check(h.ask("edge", 0, desc("path", "/api/b")), ok, want{ok, 2, minute, 1, 30 * time.Second})
	// share_threshold: every value the wildcard matches shares one counter.
	h.check(h.ask("edge", 0, desc("path", "/shared/a")), ok, want{ok, 2, minute, 1, 30 * time.Second})
	h.check(h.ask("edge", 0, desc("path", "/shared/b")), ok, want{ok, 2, minute, 0, 30 * time.Second})
	h.check(h.ask("edge", 0, desc("path", "/shared/c")), over, want{over, 2, minute, 0, 30 * time.Second})
	// No match at all: OK without a limit.
	h.check(h.ask("edge", 0, desc("path", "/other")), ok, want{code: ok})
}

func TestUnlimited(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	for range 5 {
		h.check(h.ask("edge", 0, desc("path", "/health")), ok, want{code: ok, remaining: math.MaxUint32})
	}
}

func TestNested(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	const reset = 2790 * time.Second
	h.check(h.ask("edge", 0, desc("tenant", "t1", "user", "u1")), ok, want{ok, 5, hour, 4, reset})
	h.check(h.ask("edge", 0, desc("tenant", "t2", "user", "u1")), ok, want{ok, 5, hour, 4, reset})
	h.check(h.ask("edge", 0, desc("tenant", "t1", "user", "vip")), ok, want{ok, 100, hour, 99, reset})
	// The request's depth must equal the configured depth.
	h.check(h.ask("edge", 0, desc("tenant", "t1")), ok, want{code: ok})
	h.check(h.ask("edge", 0, desc("tenant", "t1", "user", "u1", "extra", "x")), ok, want{code: ok})
	h.check(h.ask("edge", 0, desc("user", "u1")), ok, want{code: ok})
}

func TestShadowMode(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	h.check(h.ask("edge", 0, desc("shadowed", "x")), ok, want{ok, 1, second, 0, time.Second})
	// Over the limit, but shadow: OK with nothing left, like the reference.
	h.check(h.ask("edge", 0, desc("shadowed", "x")), ok, want{ok, 1, second, 0, time.Second})
	// A shadow limit over its limit does not stop the others.
	h.check(h.ask("edge", 0, desc("shadowed", "x"), desc("remote_address", "10.0.0.9")), ok,
		want{ok, 1, second, 0, time.Second}, want{ok, 3, minute, 2, 30 * time.Second})
}

func TestGlobalShadowMode(t *testing.T) {
	opts := &envoy.Options{}
	opts.Limiter.Shadow = true
	h := start(t, loadEdge(t), nil, opts)
	h.ask("edge", 3, desc("remote_address", "10.0.0.1"))
	// The descriptor says over the limit; the request is let through.
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), ok, want{over, 3, minute, 0, 30 * time.Second})
	h.check(h.ask("edge", 0, desc("remote_address", "50.0.0.5")), ok, want{over, 0, second, 0, time.Second})
}

func TestReplaces(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	read, report := desc("category", "read", "user", "u1"), desc("endpoint", "report", "user", "u1")
	for _, rem := range []uint32{9, 8, 7} {
		// read_user is replaced: OK without a limit, and not counted.
		h.check(h.ask("edge", 0, read, report), ok, want{code: ok}, want{ok, 10, minute, rem, 30 * time.Second})
	}
	h.check(h.ask("edge", 0, read), ok, want{ok, 2, minute, 1, 30 * time.Second})
}

func TestHitsAddend(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	ip := func() *commonv3.RateLimitDescriptor { return desc("remote_address", "10.0.0.1") }
	// Request-level 0 means unset: 1.
	h.check(h.ask("edge", 0, ip()), ok, want{ok, 3, minute, 2, 30 * time.Second})
	// Descriptor-level 0 checks without counting.
	h.check(h.ask("edge", 0, withHits(ip(), 0)), ok, want{ok, 3, minute, 2, 30 * time.Second})
	// Descriptor-level overrides request-level, even when 0.
	h.check(h.ask("edge", 2, withHits(ip(), 0)), ok, want{ok, 3, minute, 2, 30 * time.Second})
	h.check(h.ask("edge", 2, ip()), ok, want{ok, 3, minute, 0, 30 * time.Second})
	// A check at the limit says whether one more would pass: it would not.
	// The reference says OK here; floodgate differs on purpose: its
	// counters never pass the limit, so the reference's rule would let
	// every check pass (docs/envoy.md, "Cost").
	h.check(h.ask("edge", 0, withHits(ip(), 0)), over, want{over, 3, minute, 0, 30 * time.Second})
	// A cost the window can never hold is over the limit, and is charged
	// (usage reported after the fact spends the window, as the reference
	// counts every hit): the next request is over too.
	h.check(h.ask("edge", 0, withHits(desc("remote_address", "10.0.0.2"), 4)), over, want{over, 3, minute, 0, 30 * time.Second})
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.2")), over, want{over, 3, minute, 0, 30 * time.Second})
}

// is_negative_hits gives units back to the descriptor's current window,
// never below nothing counted, and answers OK with what is left.
func TestNegativeHitsGiveBack(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	ip := func() *commonv3.RateLimitDescriptor { return desc("remote_address", "10.0.0.1") }
	neg := func(n uint64) *commonv3.RateLimitDescriptor {
		d := withHits(ip(), n)
		d.IsNegativeHits = true
		return d
	}
	h.check(h.ask("edge", 3, ip()), ok, want{ok, 3, minute, 0, 30 * time.Second})
	h.check(h.ask("edge", 0, neg(2)), ok, want{ok, 3, minute, 2, 30 * time.Second})
	h.check(h.ask("edge", 0, ip()), ok, want{ok, 3, minute, 1, 30 * time.Second})
	// More than was charged leaves nothing counted, not less.
	h.check(h.ask("edge", 0, neg(10)), ok, want{ok, 3, minute, 3, 30 * time.Second})
	h.check(h.ask("edge", 3, ip()), ok, want{ok, 3, minute, 0, 30 * time.Second})
}

// A hit that does not fit is charged to the limit that refused it, and to
// no other: an after-the-response charge crossing a budget spends it.
func TestRefusedHitCharged(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	ip, path := desc("remote_address", "10.0.0.1"), desc("path", "/api/x")
	h.check(h.ask("edge", 2, path), ok, want{ok, 2, minute, 0, 30 * time.Second})
	// Refused by the path's limit: the path is charged, the address is not.
	h.check(h.ask("edge", 0, ip, path), over, want{ok, 3, minute, 3, 30 * time.Second}, want{over, 2, minute, 0, 30 * time.Second})
	h.check(h.ask("edge", 0, ip), ok, want{ok, 3, minute, 2, 30 * time.Second})
	// Giving back one of the path's three units still leaves it full.
	give := desc("path", "/api/x")
	give.IsNegativeHits = true
	h.check(h.ask("edge", 0, give), ok, want{ok, 2, minute, 0, 30 * time.Second})
	h.check(h.ask("edge", 0, give), ok, want{ok, 2, minute, 1, 30 * time.Second})
}

// An over-limit descriptor charges none of the others, whether they are
// decided in the same floodgate decision or in another one.
func TestOverLimitChargesNothing(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	h.ask("edge", 2, desc("path", "/api/full"))
	ip, path := desc("remote_address", "10.0.0.1"), desc("path", "/api/full")
	reset := 30 * time.Second

	// One decision: both descriptors cost 1.
	h.check(h.ask("edge", 0, ip, path), over, want{ok, 3, minute, 3, reset}, want{over, 2, minute, 0, reset})
	// Two decisions: the costs differ; the first is charged, then given back.
	h.check(h.ask("edge", 0, withHits(desc("remote_address", "10.0.0.1"), 1), withHits(desc("path", "/api/full"), 2)), over,
		want{ok, 3, minute, 3, reset}, want{over, 2, minute, 0, reset})
	// The same limit twice in one request: two decisions.
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1"), desc("remote_address", "10.0.0.2"), desc("path", "/api/full")), over,
		want{ok, 3, minute, 3, reset}, want{ok, 3, minute, 3, reset}, want{over, 2, minute, 0, reset})
	// A check-only descriptor over its limit stops the others too.
	h.check(h.ask("edge", 0, ip, withHits(desc("path", "/api/full"), 0)), over, want{ok, 3, minute, 3, reset}, want{over, 2, minute, 0, reset})
	// A blocked value stops the others.
	h.check(h.ask("edge", 0, ip, desc("remote_address", "50.0.0.5")), over, want{ok, 3, minute, 3, reset}, want{over, 0, second, 0, time.Second})

	// Nothing was charged to the address.
	h.check(h.ask("edge", 0, ip), ok, want{ok, 3, minute, 2, reset})
	// When every descriptor fits, each is charged.
	h.check(h.ask("edge", 0, ip, desc("remote_address", "10.0.0.1"), withHits(desc("path", "/api/b"), 2)), ok,
		want{ok, 3, minute, 1, reset}, want{ok, 3, minute, 0, reset}, want{ok, 2, minute, 0, reset})
}

func TestTokenBucketExtension(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	for _, rem := range []uint32{2, 1, 0} {
		resp := h.ask("edge", 0, desc("bucket", "b"))
		if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != rem {
			t.Fatalf("got %v", resp)
		}
	}
	resp := h.ask("edge", 0, desc("bucket", "b"))
	h.check(resp, over, want{over, 1, second, 0, 3 * time.Second})
	h.clock.Advance(time.Second)
	h.check(h.ask("edge", 0, desc("bucket", "b")), ok, want{ok, 1, second, 0, 3 * time.Second})
}

func TestUnknownDomain(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	h.check(h.ask("nope", 0, desc("remote_address", "10.0.0.1"), desc("x", "y")), ok, want{code: ok}, want{code: ok})
	for _, req := range []*rlsv3.RateLimitRequest{
		{Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "edge"},
	} {
		_, err := h.client.ShouldRateLimit(context.Background(), req)
		if got := status.Code(err); got != codes.InvalidArgument {
			t.Errorf("%v: code %v, want InvalidArgument", req, got)
		}
	}
}

// Lookup: a domain that no Envoy file defines names a floodgate limiter.
func TestFloodgateLimiter(t *testing.T) {
	mem := memory.New(&memory.Options{SweepInterval: -1})
	defer mem.Close()
	var clock *clocktest.Manual
	var api *floodgate.Limiter
	opts := &envoy.Options{Lookup: func(name string) *floodgate.Limiter {
		if name == "api" {
			return api
		}
		return nil
	}}
	h := start(t, loadEdge(t), mem, opts)
	clock = h.clock
	var err error
	api, err = floodgate.New("api", mem, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"user"}, Align: floodgate.AlignClock},
		{Name: "per-org", Algorithm: floodgate.FixedWindow, Limit: 100, Window: 2 * time.Hour, Key: []string{"org"}, Align: floodgate.AlignClock},
	}, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	h.check(h.ask("api", 0, desc("user", "u1")), ok, want{ok, 2, minute, 1, 30 * time.Second})
	// One decision per descriptor; the second is over, so the first is given back.
	h.check(h.ask("api", 0, desc("org", "o1"), desc("user", "u1", "org", "o1"), withHits(desc("user", "u1"), 2)), over,
		want{ok, 100, hour, 100, 2*time.Hour - 810*time.Second}, want{ok, 2, minute, 1, 30 * time.Second}, want{over, 2, minute, 0, 30 * time.Second})
	resp := h.ask("api", 0, desc("org", "o1"))
	if s := resp.Statuses[0]; s.CurrentLimit.GetUnitMultiplier().GetValue() != 2 || s.LimitRemaining != 99 {
		t.Errorf("per-org status = %v, want 2 hours and 99 left", s)
	}
	h.check(h.ask("api", 0, desc("nothing", "here")), ok, want{code: ok})
	h.check(h.ask("elsewhere", 0, desc("user", "u1")), ok, want{code: ok})
}

func TestUpdate(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	h.ask("edge", 0, desc("remote_address", "10.0.0.1"))
	other, err := envoy.NewConfig(mustParse(t, "other.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"),
		mustParse(t, "edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Update(other, nil); err != nil {
		t.Fatal(err)
	}
	// The counter survives the reload; the new limit applies.
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), ok, want{ok, 10, minute, 8, 30 * time.Second})
	h.check(h.ask("other", 0, desc("k", "v")), ok, want{ok, 1, second, 0, time.Second})
	h.check(h.ask("edge", 0, desc("path", "/api/a")), ok, want{code: ok})
	if got := h.svc.Limiter("edge").FailurePolicy(); got != floodgate.FailOpen {
		t.Fatalf("failure policy before new options: %v", got)
	}
	// New options (a reloaded failure policy) reach the domains' limiters;
	// nil options kept the old ones above.
	if err := h.svc.Update(other, &envoy.Options{Limiter: floodgate.Options{Clock: h.clock, FailurePolicy: floodgate.FailClosed}}); err != nil {
		t.Fatal(err)
	}
	if got := h.svc.Limiter("edge").FailurePolicy(); got != floodgate.FailClosed {
		t.Errorf("failure policy after Update with new options: %v, want closed", got)
	}
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), ok, want{ok, 10, minute, 7, 30 * time.Second})
}

func mustParse(t *testing.T, name, yaml string) *envoy.File {
	t.Helper()
	f, err := envoy.ParseFile(name, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type brokenStore struct{}

func (brokenStore) Apply(context.Context, *store.Batch) error { return errors.New("store down") }

// A store failure is answered by the failure policy: open is OK without a
// current_limit (the reference's answer when it has no figure; a limit
// with 0 remaining would be x-ratelimit-remaining: 0 on an admitted
// request), closed is OVER_LIMIT with the limit and nothing remaining. The
// same for an Envoy domain and for a floodgate limiter (Lookup).
// A give-back the store cannot apply answers OK without a figure.
func TestStoreFailure(t *testing.T) {
	for _, tc := range []struct {
		policy floodgate.FailurePolicy
		code   rlsv3.RateLimitResponse_Code
		domain want
		api    want
	}{
		{floodgate.FailOpen, ok, want{code: ok}, want{code: ok}},
		{floodgate.FailClosed, over, want{over, 3, minute, 0, 30 * time.Second}, want{over, 2, minute, 0, 0}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			var api *floodgate.Limiter
			opts := &envoy.Options{Lookup: func(name string) *floodgate.Limiter { return api }}
			opts.Limiter.FailurePolicy = tc.policy
			opts.Limiter.Logger = slog.New(slog.DiscardHandler)
			h := start(t, loadEdge(t), brokenStore{}, opts)
			var err error
			api, err = floodgate.New("api", brokenStore{}, []floodgate.Rule{
				{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"user"}, Align: floodgate.AlignClock},
			}, &floodgate.Options{Clock: h.clock, FailurePolicy: tc.policy, Logger: opts.Limiter.Logger})
			if err != nil {
				t.Fatal(err)
			}
			h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1")), tc.code, tc.domain)
			h.check(h.ask("api", 0, desc("user", "u1")), tc.code, tc.api)
			// A give-back (is_negative_hits) the store cannot apply is OK,
			// with no figure either.
			give := desc("remote_address", "10.0.0.1")
			give.IsNegativeHits = true
			h.check(h.ask("edge", 0, give), ok, want{code: ok})
		})
	}
}

// A descriptor's own limit (Envoy's limit override) replaces the tree.
func TestLimitOverride(t *testing.T) {
	h := start(t, loadEdge(t), nil, nil)
	withLimit := func(rpu uint32, unit typev3.RateLimitUnit, kv ...string) *commonv3.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return d
	}
	for _, rem := range []uint32{1, 0} {
		h.check(h.ask("edge", 0, withLimit(2, typev3.RateLimitUnit_MINUTE, "remote_address", "10.0.0.1")), ok, want{ok, 2, minute, rem, 30 * time.Second})
	}
	h.check(h.ask("edge", 0, withLimit(2, typev3.RateLimitUnit_MINUTE, "remote_address", "10.0.0.1")), over, want{over, 2, minute, 0, 30 * time.Second})
	// Decided together with the tree's limits: over on the override charges nothing else.
	h.check(h.ask("edge", 0, desc("remote_address", "10.0.0.1"), withLimit(2, typev3.RateLimitUnit_MINUTE, "remote_address", "10.0.0.1")), over,
		want{ok, 3, minute, 3, 30 * time.Second}, want{over, 2, minute, 0, 30 * time.Second})
	h.check(h.ask("edge", 0, withLimit(5, typev3.RateLimitUnit_HOUR, "anything", "x")), ok, want{ok, 5, hour, 4, 2790 * time.Second})
	h.check(h.ask("edge", 0, withLimit(0, typev3.RateLimitUnit_SECOND, "anything", "x")), over, want{over, 0, second, 0, time.Second})
	_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{withLimit(1, typev3.RateLimitUnit_UNKNOWN, "a", "b")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown unit: %v, want InvalidArgument", err)
	}
}

// Concurrent clients are admitted exactly the limit, in total, over gRPC.
func TestConcurrentExactAdmission(t *testing.T) {
	f := mustParse(t, "c.yaml", "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 50}\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	cfg, err := envoy.NewConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cfg, nil, nil)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				resp, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "c",
					Descriptors: []*commonv3.RateLimitDescriptor{desc("j", "x"), desc("k", "x")}})
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 50 {
		t.Errorf("admitted %d, want 50", got)
	}
	// Denied requests charged nothing to the other descriptor.
	h.check(h.ask("c", 0, desc("j", "x")), ok, want{ok, 1000, hour, 1000 - 51, 2790 * time.Second})
}

// A limit of 0 requests per unit refuses without a counter, and each
// refusal is told to the Observer as a denial of its rule, with its key;
// Limits lists that rule with the domain's counted ones.
func TestZeroLimitObserved(t *testing.T) {
	var mu sync.Mutex
	var events []floodgate.Event
	opts := &envoy.Options{}
	opts.Limiter.Observer = func(_ context.Context, e floodgate.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	h := start(t, loadEdge(t), nil, opts)
	h.check(h.ask("edge", 0, desc("remote_address", "50.0.0.5")), over, want{over, 0, second, 0, time.Second})
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 1 {
		t.Fatalf("%d events for one refusal, want 1", len(events))
	}
	e := events[0]
	rule := e.Decision.Rule
	rules := e.Rules()
	if e.Limiter != "envoy.edge" || e.Decision.Allowed || e.Decision.Reason != floodgate.ReasonLimit || rule == "" || e.Weight != 1 ||
		len(rules) != 1 || rules[0].Rule != rule || rules[0].Key != "remote_address=50.0.0.5" || !rules[0].Denied || rules[0].Failed {
		t.Errorf("event %+v, want a denial of envoy.edge's block rule for remote_address=50.0.0.5", e)
	}
	var names []string
	for _, ls := range h.svc.Limits() {
		if ls.Name != "envoy.edge" {
			continue
		}
		for _, r := range ls.Rules {
			names = append(names, r.Name)
			if r.Name == rule && (r.Limit != 0 || r.Window != time.Second) {
				t.Errorf("block rule %+v, want limit 0 per second", r)
			}
		}
	}
	if !slices.Contains(names, rule) || !slices.Contains(names, "remote_address") {
		t.Errorf("Limits lists rules %q, want the block rule %q and remote_address", names, rule)
	}
}
