package envoy_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoy"
)

// aiDomain is an Envoy AI Gateway token budget that reserves 4,000 tokens
// at each check, held for a minute, and a per-route request limit.
const aiDomain = `domain: ai
descriptors:
  - key: user_id
    rate_limit:
      unit: hour
      requests_per_unit: 10000
      floodgate: {reserve: 4000, hold: 1m}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// recorder is an envoy.Reservations that remembers what it was told.
type recorder struct {
	mu      sync.Mutex
	held    int64
	settled []string
}

func (r *recorder) Reserved(t floodgate.Ticket) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held += t.Cost * int64(len(t.Entries))
}

func (r *recorder) SettledOldest(limiter, rule, key string, s floodgate.Settlement, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled = append(r.settled, limiter+"/"+rule+"/"+key+":"+s.String())
}

// A reservable limit reserves at each check (hits_addend 0), so that a
// check that does not fit beside the holds is refused, and a charge
// settles the oldest hold of its key; a hold whose charge never comes
// lapses by itself.
func TestReservableLimit(t *testing.T) {
	cfg, err := envoy.NewConfig(mustParse(t, "ai.yaml", aiDomain))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	h := start(t, cfg, nil, &envoy.Options{Reservations: rec})
	hourLeft := time.Hour - 810*time.Second
	budget := func(code rlsv3.RateLimitResponse_Code, remaining uint32) want {
		return want{code, 10000, hour, remaining, hourLeft}
	}
	ann := func(hits uint64) *commonv3.RateLimitDescriptor { return withHits(desc("user_id", "ann"), hits) }

	h.check(h.ask("ai", 0, ann(0)), ok, budget(ok, 6000))
	h.check(h.ask("ai", 0, ann(0)), ok, budget(ok, 2000))
	h.check(h.ask("ai", 0, ann(0)), over, budget(over, 0))   // 4,000 do not fit beside the 8,000 held
	h.check(h.ask("ai", 0, ann(1000)), ok, budget(ok, 5000)) // the oldest hold becomes 1,000 used
	h.check(h.ask("ai", 0, ann(0)), ok, budget(ok, 1000))
	h.check(h.ask("ai", 0, ann(3500)), ok, budget(ok, 1500))
	h.check(h.ask("ai", 0, ann(3999)), ok, budget(ok, 1501)) // 8,499 used, nothing held
	if rec.held != 12000 || strings.Join(rec.settled, " ") != "envoy.ai/user_id/user_id=ann:settled envoy.ai/user_id/user_id=ann:settled envoy.ai/user_id/user_id=ann:settled" {
		t.Errorf("told of %d held and settlements %v, want 12000 and three settled", rec.held, rec.settled)
	}
	// A charge with no hold live is charged alone, past the budget if it
	// must be; the answer is a peek at one unit afterwards.
	h.check(h.ask("ai", 0, ann(2000)), over, budget(over, 0))
	if got := rec.settled[len(rec.settled)-1]; got != "envoy.ai/user_id/user_id=ann:lapsed" {
		t.Errorf("a charge without a hold: told %q, want lapsed", got)
	}

	// A hold whose charge never comes lapses after its hold.
	bob := func() *commonv3.RateLimitDescriptor { return withHits(desc("user_id", "bob"), 0) }
	h.check(h.ask("ai", 0, bob()), ok, budget(ok, 6000))
	h.check(h.ask("ai", 0, bob()), ok, budget(ok, 2000))
	h.clock.Advance(time.Minute)
	hourLeft -= time.Minute
	h.check(h.ask("ai", 0, bob()), ok, budget(ok, 6000))
}

// A check is all or nothing across its descriptors: a reservation is given
// back when another descriptor of the request is over its limit, and a
// reservation that does not fit charges the others nothing.
func TestReservationAllOrNothing(t *testing.T) {
	cfg, err := envoy.NewConfig(mustParse(t, "ai.yaml", aiDomain))
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, cfg, nil, nil)
	hourLeft := time.Hour - 810*time.Second
	ann := func() *commonv3.RateLimitDescriptor { return withHits(desc("user_id", "ann"), 0) }
	route := func(name string) *commonv3.RateLimitDescriptor { return withHits(desc("route", name), 1) }
	h.ask("ai", 0, route("chat"))
	h.ask("ai", 0, route("chat"))
	// The route is over: the reservation made with the request is given
	// back, and the route is charged the refused hit as Envoy's API counts
	// it.
	h.check(h.ask("ai", 0, ann(), route("chat")), over,
		want{ok, 10000, hour, 10000, hourLeft}, want{over, 2, minute, 0, 30 * time.Second})
	if d, _ := h.svc.Limiter("ai").Peek(t.Context(), floodgate.Attributes{"user_id": "ann"}, 1); d.Remaining != 10000 {
		t.Errorf("after the refused request: %d left, want 10000 (its reservation given back)", d.Remaining)
	}
	// The budget refuses: the other route is not charged.
	h.ask("ai", 0, ann())
	h.ask("ai", 0, ann())
	h.check(h.ask("ai", 0, ann(), route("other")), over,
		want{over, 10000, hour, 0, hourLeft}, want{ok, 2, minute, 2, 30 * time.Second})
	h.check(h.ask("ai", 0, route("other")), ok, want{ok, 2, minute, 1, 30 * time.Second})
}

// The reservation keys of /rlconfig follow the reference's line.
func TestDumpReservable(t *testing.T) {
	cfg, err := envoy.NewConfig(mustParse(t, "ai.yaml", aiDomain))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ai.user_id: unit=HOUR requests_per_unit=10000, shadow_mode: false, quota_mode: false, reserve: 4000, hold: 1m0s\n"; !strings.Contains(cfg.Dump(), want) {
		t.Errorf("Dump:\n%s\nwant a line %q", cfg.Dump(), want)
	}
}
