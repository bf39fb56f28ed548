package envoy

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Options are a Service's optional settings. The zero value is ready to use.
type Options struct {
	// Limiter is the template of the options given to each domain's
	// limiter: Clock, FailurePolicy, Shadow (the reference service's
	// global shadow mode), Observer and Logger. The
	// limiters are named "envoy." followed by the domain (characters other
	// than letters, digits, '.' and '_' are written as '-' and two hex
	// digits), so an Observer can tell them apart.
	Limiter floodgate.Options
	// Store, when set, keeps the counters of the domains' limiters in
	// place of the store given to New: an update can move them to a store
	// of another deadline or breaker (store/guard) over the same state.
	Store store.Store
	// Lookup, when set, is consulted for a request whose domain no Envoy
	// config file defines: if it returns a limiter, each descriptor's
	// entries become that limiter's request attributes (key → value) and
	// each descriptor is one decision. nil means such domains are
	// unknown, which the reference service answers with OK.
	Lookup func(name string) *floodgate.Limiter
	// Headers, when set, adds quota headers to every answer that has a
	// descriptor with a limit; see Headers.
	Headers *Headers
	// Reservations, when set, is told of the reservations the domains'
	// reservable limits make and settle (see Reservations).
	Reservations Reservations
}

// Service answers Envoy's ShouldRateLimit calls from a Config, keeping its
// counters in a store.Store. It is safe for concurrent use; Update
// swaps its Config while it serves.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store store.Store
	cur   atomic.Pointer[state]
}

// state is one Config and the Options in force, with the limiters built
// from them.
type state struct {
	cfg      *Config
	opts     Options
	clock    floodgate.Clock               // opts.Limiter.Clock, or the system clock
	store    store.Store                   // opts.Store, or the Service's
	limiters map[string]*floodgate.Limiter // by domain; absent for a domain without rules
	named    map[string]*domain            // by limiter name

	mu        sync.Mutex
	overrides map[overrideKey]*floodgate.Limiter // built on demand; see override
}

// New returns a Service that decides with cfg (nil means no domains) and
// keeps its counters in store. opts may be nil. It returns an error when a
// domain's rules do not make a limiter, which LoadDir has already ruled out.
func New(store store.Store, cfg *Config, opts *Options) (*Service, error) {
	if store == nil {
		return nil, fmt.Errorf("envoy: store must not be nil")
	}
	if opts == nil {
		opts = &Options{}
	}
	s := &Service{store: store}
	if err := s.Update(cfg, opts); err != nil {
		return nil, err
	}
	return s, nil
}

// Update makes cfg (nil means no domains) the Service's configuration, and
// opts, when not nil, its options (a reload that changes the failure
// policy, or the store's deadline or breaker). The swap is atomic: each call
// to ShouldRateLimit sees either the old or the new configuration. Counters
// live in the store, so a domain's limits keep their counts across an
// update as long as its descriptors keep their paths. On error the old
// configuration stays.
func (s *Service) Update(cfg *Config, opts *Options) error {
	if cfg == nil {
		cfg = &Config{}
	}
	if opts == nil {
		opts = &s.cur.Load().opts
	}
	st := &state{cfg: cfg, opts: *opts, clock: opts.Limiter.Clock, store: opts.Store, limiters: make(map[string]*floodgate.Limiter, len(cfg.domains)),
		named: make(map[string]*domain, len(cfg.domains))}
	if st.clock == nil {
		st.clock = floodgate.SystemClock{}
	}
	if st.store == nil {
		st.store = s.store
	}
	for name, d := range cfg.domains {
		st.named[limiterName(name)] = d
		if len(d.leaves) == 0 {
			continue
		}
		lopts := st.opts.Limiter
		if old := s.cur.Load(); old != nil {
			lopts.Replaces = old.limiters[name] // an update takes over the old version's keys
		}
		l, err := floodgate.New(limiterName(name), st.store, d.rules(), &lopts)
		if err != nil {
			return fmt.Errorf("envoy: domain %q (%s): %w", name, d.file, err)
		}
		st.limiters[name] = l
	}
	old := s.cur.Swap(st)
	if old != nil {
		for name, l := range old.limiters {
			// A domain removed, or left without limits, gives up its
			// limiter's name, so that it can come back with other limits.
			if st.limiters[name] == nil {
				l.Close()
			}
		}
	}
	return nil
}

// Config returns the configuration in use.
func (s *Service) Config() *Config { return s.cur.Load().cfg }

// Limiter returns the limiter that serves domain, or nil when the domain
// is not configured or has no finite limits.
func (s *Service) Limiter(domain string) *floodgate.Limiter { return s.cur.Load().limiters[domain] }

// RuleName returns the name operators read for the rule named rule of the
// Service's limiter named limiter: a domain's limit is a rule whose name has
// its descriptor path's characters other than letters, digits, '.' and '_'
// escaped (path_-2fapi-2f-2a), as names must be, and is read as written
// (path_/api/*). Any other name is returned as it is.
func (s *Service) RuleName(limiter, rule string) string {
	if d := s.cur.Load().named[limiter]; d != nil {
		if w, ok := d.written[rule]; ok {
			return w
		}
	}
	return rule
}

// RuleKeys returns the entry keys, in order, of the descriptors that the
// rule named rule of the Service's limiter named limiter counts (tenant,
// user), or nil when it is no domain's limit.
func (s *Service) RuleKeys(limiter, rule string) []string {
	if d := s.cur.Load().named[limiter]; d != nil {
		return slices.Clone(d.keys[rule])
	}
	return nil
}

// Domain returns the domain whose limiter is named limiter ("edge" for
// "envoy.edge"), and false when no domain's is.
func (s *Service) Domain(limiter string) (string, bool) {
	if d := s.cur.Load().named[limiter]; d != nil {
		return d.name, true
	}
	return "", false
}

// Limits is one limiter of a Service as operators see it: a domain's, or
// one made for limit overrides in requests to the domain.
type Limits struct {
	// Name is the limiter name its decisions are reported under (see
	// Options.Limiter).
	Name string
	// Domain and File are the domain and the file that configures it.
	Domain string
	File   string
	// Limiter decides the counted limits; nil for a domain without any
	// (its limits are all unlimited or 0 requests per unit).
	Limiter *floodgate.Limiter
	// Rules are Limiter's rules, then, for a domain, one rule of limit 0
	// for each limit of 0 requests per unit, whose refusals the Observer
	// is told of under that rule's name.
	Rules []floodgate.Rule
}

// Limits lists the Service's limiters, sorted by name: one per domain,
// and one per limit override window requested so far.
func (s *Service) Limits() []Limits {
	st := s.cur.Load()
	var out []Limits
	for name, d := range st.cfg.domains {
		ls := Limits{Name: limiterName(name), Domain: name, File: d.file, Limiter: st.limiters[name]}
		if ls.Limiter != nil {
			ls.Rules = ls.Limiter.Rules()
		}
		ls.Rules = append(ls.Rules, d.zeroRules()...)
		out = append(out, ls)
	}
	st.mu.Lock()
	for k, l := range st.overrides {
		out = append(out, Limits{Name: l.Name(), Domain: k.domain, File: st.cfg.File(k.domain), Limiter: l, Rules: l.Rules()})
	}
	st.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Register registers the Service on a gRPC server as
// envoy.service.ratelimit.v3.RateLimitService.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(r, s)
}

// ShouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService.
//
// Each descriptor is matched against the domain's tree (see docs/envoy.md)
// and gets a status: OK without a current_limit when nothing matched, when
// the match is unlimited (limit_remaining is then the largest uint32) or
// when another matched limit replaces it; otherwise the code, current_limit,
// limit_remaining and duration_until_reset of its limit. overall_code is
// OVER_LIMIT when any enforced limit is.
//
// A descriptor's cost is its hits_addend when set (0 checks without
// counting), else the request's hits_addend, else 1. The descriptors of one
// cost are decided in one atomic floodgate decision; when a request needs
// several (several costs, or one limit matched twice), they are taken in
// turn and an over-limit answer gives back what the earlier ones took, so
// a request that is over the limit anywhere is charged nowhere. A
// reservable limit (its extension's reserve) reserves at a check and
// settles at a charge instead; see reserve.go.
//
// An empty domain or descriptor list is an InvalidArgument error. A store
// failure is decided by the limiter's failure policy: OK when it fails
// open, OVER_LIMIT when it fails closed.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	st := s.cur.Load()
	resp := newResponse(len(req.Descriptors))
	d := st.cfg.domains[req.Domain]
	switch {
	case d != nil:
		if err := s.decideDomain(ctx, st, d, req, resp); err != nil {
			return nil, err
		}
	case st.opts.Lookup != nil:
		if l := st.opts.Lookup(req.Domain); l != nil {
			s.decideLimiter(ctx, l, req, resp)
		}
	}
	msg := resp.msg
	for i, ds := range msg.Statuses {
		if ds == nil {
			resp.status(i).Code = rlsv3.RateLimitResponse_OK
		} else if ds.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			msg.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if st.opts.Headers != nil {
		st.opts.Headers.add(msg)
	}
	if d != nil && st.opts.Limiter.Shadow {
		msg.OverallCode = rlsv3.RateLimitResponse_OK // global shadow mode
	}
	return msg, nil
}

// cost returns descriptor i's units: its own hits_addend when set (0
// checks only), else the request's, where 0 means unset and so 1. With
// is_negative_hits they are units to give back.
func cost(req *rlsv3.RateLimitRequest, i int) int64 {
	if h := req.Descriptors[i].GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), math.MaxInt32))
	}
	return int64(max(1, req.GetHitsAddend()))
}

// group is one floodgate decision of a request: descriptors of one cost
// (and one reservation), each limit at most once.
type group struct {
	l    *floodgate.Limiter
	cost int64 // 0 checks only, or reserves
	// reserve, when not 0, makes the group's check a reservation of
	// reserve units held for hold (reservable limits; reserve.go).
	reserve int64
	hold    time.Duration
	attrs   floodgate.Attributes
	descs   []int // request descriptor indexes, parallel to leaves
	// leaves are the descriptors' limits (Envoy domains); nil entries for
	// descriptors decided by a floodgate limiter of the Lookup.
	leaves []*leaf

	// out is the decision; its Rules and ticket are there only when the
	// group was decided in full (see decide).
	out      floodgate.Outcome
	refunded bool // the decision was admitted, then given back
}

// decide makes g's decision: a consume of g.cost (0 checks only) or a peek
// of it. A group of several limits needs each one's result, and a charge
// that may be given back needs its ticket: those are decided in full
// (Limiter.Decide). Any other group is one limit, or one of floodgate's own
// limiters, read off the binding rule alone, and takes the lean call that
// builds neither (one allocation fewer per request).
//
// A reservation's group reserves (a consume) or peeks at what it would
// hold.
func (g *group) decide(ctx context.Context, mode floodgate.Mode, refundable bool) {
	if g.reserve > 0 && mode == floodgate.ModeConsume {
		// The limit is reservable and its reserve and hold valid (the
		// parser checked them): no error.
		g.out, _ = g.l.Reserve(ctx, g.attrs, g.reserve, g.hold)
		return
	}
	if refundable || len(g.leaves) > 1 {
		// The mode is a decision and a peek costs at least 1: no error.
		g.out, _ = g.l.Decide(ctx, mode, g.attrs, g.units())
		return
	}
	var d floodgate.Decision
	if mode == floodgate.ModePeek {
		d, _ = g.l.Peek(ctx, g.attrs, g.units())
	} else {
		d, _ = g.l.AllowN(ctx, g.attrs, g.cost) // cost 0 is a check
	}
	g.out = floodgate.Outcome{Decision: d}
}

// units are what g takes when admitted: its reservation's, or its cost.
func (g *group) units() int64 {
	if g.reserve > 0 {
		return g.reserve
	}
	return g.cost
}

// check reports whether g only checks: cost 0, and no reservation.
func (g *group) check() bool { return g.cost == 0 && g.reserve == 0 }

// run decides the groups so that a request denied anywhere is charged
// only where it was refused: checks first, then the charging groups in
// turn; after a denial the rest are only checked, what was taken is given
// back, and each limit that refused the request is charged its cost
// (chargeRefused). blocked says the request is already denied.
func run(ctx context.Context, groups []*group, blocked bool) {
	denied := blocked
	charging := 0
	for _, g := range groups {
		if g.check() {
			g.decide(ctx, floodgate.ModeConsume, false)
			denied = denied || !g.out.Allowed
		} else {
			charging++
		}
	}
	// A charge (or a reservation) is given back only when a later one is
	// denied.
	refundable := charging > 1
	for k, g := range groups {
		if g.check() {
			continue
		}
		if denied {
			g.decide(ctx, floodgate.ModePeek, false)
			g.chargeRefused(ctx)
			continue
		}
		g.decide(ctx, floodgate.ModeConsume, refundable)
		if g.out.Allowed {
			continue
		}
		g.chargeRefused(ctx)
		// Every charging group before this one was admitted: give
		// back what they took.
		denied = true
		for _, t := range groups[:k] {
			if t.check() {
				continue
			}
			// A refund that fails leaves the limit stricter, and is
			// logged by the limiter; a reservation's releases it.
			_ = t.l.Refund(ctx, t.out.Ticket())
			t.refunded = true
		}
	}
}

// chargeRefused records g's cost into each Envoy-format limit of g that
// refused it, as the reference service counts every hit: usage reported
// after the response (Envoy AI Gateway's stream-done charges, whose answer
// is ignored) is spent even when it does not fit, and later requests are
// refused until the window turns. Only the reference's own kind of limit,
// a fixed window, is charged: the limits of g that admitted are not, nor
// floodgate's algorithms used as an extension (a token bucket keeps its
// meaning), nor anything when the store failed, a shadow limit would
// have refused, or g is one of floodgate's own limiters (whose refused
// requests never count).
func (g *group) chargeRefused(ctx context.Context) {
	// A check, or a reservation, has nothing to charge.
	if g.cost == 0 || g.out.Reason == floodgate.ReasonStore || len(g.leaves) == 0 {
		return
	}
	var refused floodgate.Attributes
	for _, lf := range g.leaves {
		if r, applied := g.result(lf.rule); !applied || r.allowed || lf.shadow || lf.algorithm != floodgate.FixedWindow {
			continue
		}
		if refused == nil {
			refused = make(floodgate.Attributes, len(g.leaves)+1)
		}
		refused[lf.rule] = g.attrs[lf.rule]
		if lf.override {
			refused[overrideLimitAttr] = g.attrs[overrideLimitAttr]
		}
	}
	if refused != nil {
		// A record that fails leaves the limit looser by this hit; the
		// limiter's failure policy logs it.
		_, _ = g.l.Record(ctx, refused, g.cost)
	}
}
