package floodgate

import (
	"context"
	"math/bits"
	"time"

	"github.com/floodgate-go/floodgate/internal/algo"
	"github.com/floodgate-go/floodgate/internal/scope"
	"github.com/floodgate-go/floodgate/store"
)

// Rule is one limit of a limiter: at most Limit units per Window for each key.
type Rule struct {
	// Name identifies the rule within its limiter: letters, digits, '.', '_'
	// and '-'.
	Name string
	// Algorithm selects how the rule counts.
	Algorithm Algorithm
	// Limit is the units admitted per Window (leases held at once for
	// Concurrency). It must be at least 1.
	Limit int64
	// Window is the period of the limit (the lease lifetime for
	// Concurrency), at least 1ms. Calendar-aligned fixed windows ignore it.
	Window time.Duration
	// Burst is the capacity of TokenBucket and GCRA; 0 means Limit. Other
	// algorithms reject it.
	Burst int64
	// Buckets is the number of SlidingWindow sub-buckets. The Window must
	// divide into them in whole microseconds. 0 means 60, or the largest
	// number under 60 that divides the window (50 for 1s).
	Buckets int64
	// Align places FixedWindow windows (default: at the key's first hit).
	Align Align
	// Location is the time zone of AlignDay and AlignMonth; nil means UTC.
	Location *time.Location
	// Key lists the request attributes whose values, joined in order, form
	// the rule's key. The rule is skipped for a request that lacks one of
	// them (or has it empty). An empty Key makes one key shared by all
	// requests.
	Key []string
	// KeyFunc, when set, replaces Key: it derives the key from the request,
	// and "" skips the rule. It is given a copy of the request's
	// attributes, its own to keep.
	KeyFunc func(Attributes) string
	// Overrides replace Limit (and Burst) for requests whose attributes
	// match; the first match wins.
	Overrides []Override
	// LimitFunc, when set, is consulted after Overrides: it returns the
	// limit for this request, or 0 to keep the one found so far. Its error
	// makes the decision a store failure under the failure policy. Like
	// KeyFunc, it is given a copy of the attributes.
	LimitFunc func(ctx context.Context, attrs Attributes) (int64, error)
	// Shadow makes the rule report without enforcing: a shadow rule that
	// would deny neither denies the decision nor consumes.
	Shadow bool
	// Reservable lets Limiter.Reserve hold units of the rule: a budget,
	// such as a tenant's tokens per day. Its keys keep the reservations'
	// holds, and each decision on the rule counts them. It applies to
	// FixedWindow rules, and not with Grant.
	Reservable bool
	// Grant asks for the rule's consumes to be answered in-process from
	// quota grants, blocks of units the store charges at once, when the
	// limiter's store is a grant decorator (store/grant) over a shared
	// store: for a key so hot that every instance's decisions would meet
	// on one Redis shard. Other stores ignore it. It applies to
	// FixedWindow and TokenBucket rules, never to shadow ones.
	Grant bool
}

// Override gives requests whose attributes equal every value in Match their
// own limit.
type Override struct {
	Match Attributes
	Limit int64
	// Burst, when set, replaces the rule's Burst as well. When it is 0 the
	// burst keeps the rule's proportion to its limit (rounded down, at least 1): a
	// rule of 20/s with burst 40 overridden to 200/s bursts to 400.
	Burst int64
}

const (
	defaultBuckets = 60
	maxBuckets     = 3600
	minWindow      = time.Millisecond
)

// compiledRule is a validated Rule with its derived constants.
type compiledRule struct {
	Rule
	index  int    // its place among the limiter's rules
	label  string // "limiter/rule", for messages
	scope  string // where its state is stored (see internal/scope)
	params store.Params
	shadow bool // the rule or its limiter runs dark
}

// withDefaults is the rule as given, with the defaults New applied.
func (c *compiledRule) withDefaults() Rule {
	r := c.Rule
	if r.Burst == 0 {
		r.Burst = c.params.Burst
	}
	return r
}

func compileRule(limiter string, index int, r Rule) (*compiledRule, error) {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Limiter: limiter, Rule: r.Name, RuleIndex: index, Field: field, Reason: sprintf(format, args...)}
	}
	if r.Name == "" {
		return nil, bad("name", "must not be empty") // Error names it by its index
	}
	if !validName(r.Name) {
		return nil, bad("name", "%q may hold only letters, digits, '.', '_' and '-'", r.Name)
	}
	if r.Algorithm == 0 {
		return nil, bad("algorithm", "must be set (%s)", store.AlgorithmNames())
	}
	if !r.Algorithm.Valid() {
		return nil, bad("algorithm", "unknown algorithm %d (want %s)", uint8(r.Algorithm), store.AlgorithmNames())
	}
	if r.Limit < 1 {
		return nil, bad("limit", "must be at least 1, got %d", r.Limit)
	}
	calendar := r.Algorithm == FixedWindow && (r.Align == AlignDay || r.Align == AlignMonth)
	if r.Align > AlignMonth {
		return nil, bad("align", "unknown alignment %d", uint8(r.Align))
	}
	if r.Align != AlignFirstHit && r.Algorithm != FixedWindow {
		return nil, bad("align", "applies to fixed_window only, not %s", r.Algorithm)
	}
	if !calendar {
		if r.Window < minWindow {
			return nil, bad("window", "must be at least 1ms, got %v", r.Window)
		}
		if r.Window%time.Microsecond != 0 {
			return nil, bad("window", "must be a whole number of microseconds, got %v", r.Window)
		}
	}
	if r.Location != nil && !calendar {
		return nil, bad("location", "applies to calendar-aligned fixed windows only")
	}
	if r.Burst < 0 {
		return nil, bad("burst", "must not be negative, got %d", r.Burst)
	}
	if r.Burst != 0 && r.Algorithm != TokenBucket && r.Algorithm != GCRA {
		return nil, bad("burst", "applies to token_bucket and gcra only, not %s", r.Algorithm)
	}
	if r.Reservable && r.Algorithm != FixedWindow {
		return nil, bad("reservable", "applies to fixed_window only, not %s", r.Algorithm)
	}
	if r.Reservable && r.Grant {
		return nil, bad("reservable", "a rule answered from quota grants cannot hold reservations")
	}
	if r.Grant && r.Algorithm != FixedWindow && r.Algorithm != TokenBucket {
		return nil, bad("grant", "applies to fixed_window and token_bucket only, not %s", r.Algorithm)
	}
	if r.Buckets != 0 && r.Algorithm != SlidingWindow {
		return nil, bad("buckets", "applies to sliding_window only, not %s", r.Algorithm)
	}
	if r.Algorithm == SlidingWindow {
		if r.Buckets == 0 {
			r.Buckets = defaultBucketsFor(r.Window)
		}
		if r.Buckets < 1 || r.Buckets > maxBuckets {
			return nil, bad("buckets", "must be between 1 and %d, got %d", maxBuckets, r.Buckets)
		}
		if us := r.Window.Microseconds(); us%r.Buckets != 0 {
			return nil, bad("buckets", "window %v does not divide into %d buckets of whole microseconds", r.Window, r.Buckets)
		}
	}
	for i, name := range r.Key {
		if name == "" {
			return nil, bad(sprintf("key[%d]", i), "attribute name must not be empty")
		}
	}
	for i, o := range r.Overrides {
		f := sprintf("overrides[%d]", i)
		if len(o.Match) == 0 {
			return nil, bad(f+".match", "must name at least one attribute")
		}
		if o.Limit < 1 {
			return nil, bad(f+".limit", "must be at least 1, got %d", o.Limit)
		}
		if o.Burst < 0 || (o.Burst != 0 && r.Algorithm != TokenBucket && r.Algorithm != GCRA) {
			return nil, bad(f+".burst", "must be positive and applies to token_bucket and gcra only")
		}
		if err := checkExact(r, o.Limit, burstFor(r, o.Limit, o.Burst)); err != "" {
			return nil, bad(f+".limit", "%s", err)
		}
	}
	if err := checkExact(r, r.Limit, r.Burst); err != "" {
		return nil, bad("limit", "%s", err)
	}
	c := &compiledRule{Rule: r, label: limiter + "/" + r.Name, scope: scope.Of(limiter, r.Name, r.Algorithm, r.Align, r.Window)}
	c.params = store.Params{
		Algorithm: r.Algorithm, Limit: r.Limit, Window: r.Window, Burst: r.Burst,
		Buckets: r.Buckets, Align: r.Align, Location: r.Location, Holds: r.Reservable,
	}
	if c.params.Burst == 0 && (r.Algorithm == TokenBucket || r.Algorithm == GCRA) {
		c.params.Burst = r.Limit
	}
	return c, nil
}

// checkExact keeps the products the algorithms form within the range where
// integer arithmetic is exact on every store (see algo.MaxUnits).
func checkExact(r Rule, limit, burst int64) string {
	if r.Algorithm != TokenBucket && r.Algorithm != GCRA {
		if limit > algo.MaxUnits/4 {
			return sprintf("%d is too large (at most %d)", limit, int64(algo.MaxUnits/4))
		}
		return ""
	}
	if burst == 0 {
		burst = limit
	}
	w := r.Window.Microseconds()
	if w > 0 && (max(burst, limit) > algo.MaxUnits/4/w) {
		return sprintf("limit or burst %d times window %v exceeds 2^51 microsecond-units; use a shorter window or a smaller limit", max(burst, limit), r.Window)
	}
	return ""
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// paramsFor returns the rule's parameters for one request.
func (c *compiledRule) paramsFor(ctx context.Context, attrs Attributes) (store.Params, error) {
	p := c.params
	for _, o := range c.Overrides {
		if o.Match.matches(attrs) {
			p.Limit = o.Limit
			if p.Algorithm == TokenBucket || p.Algorithm == GCRA {
				p.Burst = burstFor(c.Rule, o.Limit, o.Burst)
			}
			break
		}
	}
	if c.LimitFunc != nil {
		l, err := c.LimitFunc(ctx, attrs.clone())
		if err != nil {
			return p, err
		}
		if l < 0 || l > algo.MaxUnits/4 {
			return p, sprintfErr("rule %s: limit function returned %d", c.label, l)
		}
		if l > 0 {
			if p.Algorithm == TokenBucket || p.Algorithm == GCRA {
				p.Burst = burstFor(c.Rule, l, 0)
			}
			p.Limit = l
			if msg := checkExact(c.Rule, p.Limit, p.Burst); msg != "" {
				return p, sprintfErr("rule %s: limit function: %s", c.label, msg)
			}
		}
	}
	return p, nil
}

// burstFor is the burst of rule r under limit (an override's or a limit
// function's): burst when set, else the rule's burst scaled to the limit.
func burstFor(r Rule, limit, burst int64) int64 {
	if burst != 0 {
		return burst
	}
	return scaledBurst(r.Limit, r.Burst, limit)
}

// scaledBurst is the burst a token bucket or GCRA rule of the given limit
// and burst (0: the limit) has under another limit that sets no burst of its
// own (an override without one, a LimitFunc): the rule's proportion of burst
// to limit, rounded down, at least 1. A rule that sets no burst bursts to
// its limit, whatever the limit.
func scaledBurst(ruleLimit, ruleBurst, limit int64) int64 {
	if ruleBurst == 0 || ruleLimit <= 0 {
		return limit
	}
	hi, lo := bits.Mul64(uint64(ruleBurst), uint64(limit))
	if hi >= uint64(ruleLimit) {
		return algo.MaxUnits // far past what validation accepts
	}
	q, _ := bits.Div64(hi, lo, uint64(ruleLimit))
	return max(1, int64(min(q, algo.MaxUnits)))
}

// refundParams are the parameters a refund of e applies under: the limits
// the units were charged with, when the ticket carries valid ones.
func (c *compiledRule) refundParams(e TicketEntry) store.Params {
	p := c.params
	if e.Limit > 0 && checkExact(c.Rule, e.Limit, e.Burst) == "" {
		p.Limit = e.Limit
		if e.Burst > 0 && (p.Algorithm == TokenBucket || p.Algorithm == GCRA) {
			p.Burst = e.Burst
		}
	}
	return p
}

// defaultBucketsFor is the largest bucket count up to 60 that divides w into
// whole microseconds.
func defaultBucketsFor(w time.Duration) int64 {
	us := w.Microseconds()
	for b := int64(defaultBuckets); b > 1; b-- {
		if us%b == 0 {
			return b
		}
	}
	return 1
}
