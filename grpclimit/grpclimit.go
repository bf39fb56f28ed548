// Package grpclimit is floodgate's gRPC server middleware: unary and stream
// interceptors that ask a limiter about every call.
//
// A denied call fails with codes.ResourceExhausted. Its status carries an
// errdetails.RetryInfo (the exact wait, so retrying then succeeds) and an
// errdetails.QuotaFailure naming the violated rules, and its header and
// trailer metadata carry the same values the HTTP middleware sends as
// headers: "ratelimit-policy", "ratelimit" and "retry-after" (whole
// seconds). Admitted calls get "ratelimit-policy" and "ratelimit" in their
// header metadata. When the store fails, a FailOpen limiter lets calls
// through and a FailClosed one fails them with codes.Unavailable and a
// RetryInfo.
//
// A stream is one call: it is limited when it opens. Concurrency rules have
// their lease released when the handler returns, and Options.Count can
// refund successful (or failed) calls then, so that only the others count.
// Options.ChargeAfter admits a call while one unit is available and
// charges, when the handler returns, the usage it reported with AddCost
// (tokens of an LLM call, rows of a query); a Concurrency rule then holds
// its lease for the handler, and the usage goes to the other rules.
// Options.Reserve keeps a budget exactly: each call reserves the most it can
// use on the limiter's reservable rules when it is admitted, and the
// reservation is settled with the usage reported with AddCost when the
// handler returns.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/internal/admission"
	"github.com/floodgate-go/floodgate/internal/quota"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Metadata keys of the quota values.
const (
	MetadataRateLimitPolicy = "ratelimit-policy"
	MetadataRateLimit       = "ratelimit"
	MetadataRetryAfter      = "retry-after"
)

// A KeyFunc returns the value of one call attribute from the call's context
// (which holds its peer and incoming metadata) and its full method name
// ("/pkg.Service/Method"). "" means the call has no such attribute: rules
// keyed on it are skipped.
type KeyFunc func(ctx context.Context, fullMethod string) string

var peerOnly = clientip.MustNew(nil)

// PeerIP keys on the caller's address as res resolves it, from the socket
// peer and, when res trusts the peer as a proxy, the forwarding metadata
// ("x-forwarded-for" or "forwarded"). A nil res uses the socket peer only.
// IPv6 callers are bucketed to res's prefix (/64 by default).
func PeerIP(res *clientip.Resolver) KeyFunc {
	if res == nil {
		res = peerOnly
	}
	return func(ctx context.Context, _ string) string {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return ""
		}
		md, _ := metadata.FromIncomingContext(ctx)
		return res.Resolve(peerAddr(p.Addr), mdHeaders(md)).Key
	}
}

func peerAddr(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(t.IP)
		return ip
	}
	ip, _ := clientip.ParseAddr(a.String())
	return ip
}

// mdHeaders lets the resolver read forwarding headers from gRPC metadata.
type mdHeaders metadata.MD

func (m mdHeaders) Values(name string) []string { return metadata.MD(m).Get(name) }

// Metadata keys on the first value of the incoming metadata key, such as an
// API key ("x-api-key").
func Metadata(key string) KeyFunc {
	return func(ctx context.Context, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(key); len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// Method keys on the full method name, for per-method limits.
func Method() KeyFunc {
	return func(_ context.Context, fullMethod string) string { return fullMethod }
}

// FromContext keys on a value an earlier interceptor put in the context,
// such as the authenticated user.
func FromContext(f func(ctx context.Context) string) KeyFunc {
	return func(ctx context.Context, _ string) string { return f(ctx) }
}

// Count says which admitted calls keep their charge.
type Count uint8

const (
	// CountAll charges every admitted call (the default).
	CountAll Count = iota
	// CountFailures refunds calls that succeeded, so only failures count:
	// a login method limited on wrong credentials.
	CountFailures
	// CountSuccesses refunds calls that failed, so only successes count.
	CountSuccesses
)

// Options configure an Interceptor.
type Options struct {
	// Attributes name the call attributes the limiter's rules are keyed on,
	// each with the KeyFunc that extracts it. Every attribute a rule lists
	// in Rule.Key must be here.
	Attributes map[string]KeyFunc
	// OmitQuotaMetadata leaves "ratelimit-policy" and "ratelimit" out of
	// the metadata.
	OmitQuotaMetadata bool
	// Count selects which admitted calls keep their charge: CountAll (the
	// default), CountFailures (a login method that counts failed attempts
	// only) or CountSuccesses; the others are refunded when the handler
	// returns.
	Count Count
	// Failed classifies a handler's error for Count; nil means any non-nil
	// error is a failure.
	Failed func(err error) bool
	// ChargeAfter admits a call when the limiter would admit one unit now,
	// charging nothing up front, and when the handler returns records what
	// it reported with AddCost (Limiter.Record), whether it succeeded or
	// not. Use it for usage known only once the work is done. It cannot be
	// combined with Count. Concurrency rules take their lease up front and
	// hold it until the handler returns; the usage is recorded into the
	// other rules.
	ChargeAfter bool
	// Reserve, when set, makes every call a reservation
	// (floodgate.Limiter.Reserve): it returns the most units the call can
	// use (an LLM call's max_tokens; less than 1 is taken as 1) from the
	// call's context, its full method name and, for a unary call, its
	// request message (nil for a stream, which is limited when it opens).
	// They are held on the limiter's reservable rules (Rule.Reservable)
	// for Hold, with one unit of its other rules, all or nothing, so that
	// concurrent calls never spend more than a budget. When the handler
	// returns, the reservation is settled with what it reported with
	// AddCost, failed or not (nothing reported releases it), and its
	// Concurrency leases are released. A reservation that is never settled
	// (the process died) lapses after Hold. It cannot be combined with
	// ChargeAfter or Count.
	Reserve func(ctx context.Context, fullMethod string, req any) int64
	// Hold is how long a reservation's units stay held unless settled
	// first; required with Reserve, and at least 1ms.
	Hold time.Duration
}

// costKey is the context key of a ChargeAfter call's usage.
type costKey struct{}

// usage is what the handlers of one ChargeAfter call reported, with the
// usage of the interceptor outside this one, if any.
type usage struct {
	n      atomic.Int64
	parent *usage
}

// AddCost adds n units to the usage the call is charged for when its
// handler returns, for interceptors with Options.ChargeAfter or
// Options.Reserve set (a reservation is settled with them). It reports whether such an interceptor is handling the call. When several
// are, each is charged.
func AddCost(ctx context.Context, n int64) bool {
	u, _ := ctx.Value(costKey{}).(*usage)
	for p := u; p != nil; p = p.parent {
		p.n.Add(n)
	}
	return u != nil
}

// Interceptor limits gRPC calls with a floodgate.Limiter. It is safe for
// concurrent use.
type Interceptor struct {
	limiter *floodgate.Limiter
	gate    *admission.Gate
	attrs   []namedKey
	quota   *quota.Formatter
	noQuota bool
	count   Count
	failed  func(error) bool
	charge  bool // the usage is charged after: ChargeAfter, or Reserve's settlement
	reserve func(context.Context, string, any) int64
	leased  bool // a rule's units are leases (Concurrency)
	pool    sync.Pool
}

type namedKey struct {
	name string
	f    KeyFunc
}

// New returns an interceptor that limits calls with l. It returns an error
// for a nil limiter, a nil KeyFunc, or a rule keyed on an attribute that no
// KeyFunc supplies.
func New(l *floodgate.Limiter, opts *Options) (*Interceptor, error) {
	if l == nil {
		return nil, errors.New("grpclimit: New: limiter must not be nil")
	}
	if opts == nil {
		opts = &Options{}
	}
	in := &Interceptor{
		limiter: l, quota: quota.New(l), noQuota: opts.OmitQuotaMetadata,
		count: opts.Count, failed: opts.Failed, charge: opts.ChargeAfter || opts.Reserve != nil,
		reserve: opts.Reserve,
	}
	if in.count > CountSuccesses {
		return nil, fmt.Errorf("grpclimit: limiter %q: unknown Count %d", l.Name(), in.count)
	}
	switch {
	case opts.ChargeAfter && in.count != CountAll:
		return nil, fmt.Errorf("grpclimit: limiter %q: ChargeAfter charges after the handler; it cannot be combined with Count", l.Name())
	case in.reserve != nil && opts.Hold == 0:
		return nil, fmt.Errorf("grpclimit: limiter %q: Reserve needs a Hold: how long a reservation's units stay held unless settled", l.Name())
	case in.reserve == nil && opts.Hold != 0:
		return nil, fmt.Errorf("grpclimit: limiter %q: Hold is the hold of reservations, which only Reserve makes", l.Name())
	case in.reserve != nil && in.count != CountAll:
		return nil, fmt.Errorf("grpclimit: limiter %q: a reservation is settled with the usage after the handler; it cannot be combined with Count", l.Name())
	}
	if in.failed == nil {
		in.failed = func(err error) bool { return err != nil }
	}
	for name, f := range opts.Attributes {
		if name == "" || f == nil {
			return nil, fmt.Errorf("grpclimit: limiter %q: attribute %q needs a name and a KeyFunc", l.Name(), name)
		}
		in.attrs = append(in.attrs, namedKey{name, f})
	}
	for _, r := range l.Rules() {
		if r.KeyFunc != nil {
			continue
		}
		for _, a := range r.Key {
			if opts.Attributes[a] == nil {
				return nil, fmt.Errorf("grpclimit: limiter %q: rule %q is keyed on attribute %q, which no KeyFunc in Options.Attributes supplies", l.Name(), r.Name, a)
			}
		}
	}
	in.leased = slices.ContainsFunc(l.Rules(), func(r floodgate.Rule) bool { return r.Algorithm == floodgate.Concurrency })
	var err error
	in.gate, err = admission.New(l, admission.Options{Rules: !in.noQuota, Refunds: in.count != CountAll, ChargeAfter: opts.ChargeAfter, Hold: opts.Hold})
	if err != nil {
		return nil, fmt.Errorf("grpclimit: limiter %q: %w", l.Name(), err)
	}
	n := len(in.attrs)
	in.pool.New = func() any { return make(floodgate.Attributes, n) }
	return in, nil
}

// Unary returns the unary server interceptor, for grpc.ChainUnaryInterceptor.
func (in *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		hctx, release, err := in.admit(ctx, info.FullMethod, req, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) },
			func(md metadata.MD) error { return grpc.SetTrailer(ctx, md) })
		if err != nil {
			return nil, err
		}
		ctx = hctx
		herr := errPanicked
		defer func() { release(herr) }()
		resp, err := handler(ctx, req)
		herr = err
		return resp, err
	}
}

// Stream returns the stream server interceptor, for
// grpc.ChainStreamInterceptor. The stream is limited once, when it opens.
func (in *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		hctx, release, err := in.admit(ss.Context(), info.FullMethod, nil, ss.SetHeader, func(md metadata.MD) error { ss.SetTrailer(md); return nil })
		if err != nil {
			return err
		}
		if hctx != ss.Context() {
			ss = &contextStream{ServerStream: ss, ctx: hctx}
		}
		herr := errPanicked
		defer func() { release(herr) }()
		err = handler(srv, ss)
		herr = err
		return err
	}
}

// contextStream is a stream whose handler sees another context.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

func noop(error) {}

// errPanicked is what release sees when the handler panicked: a failure.
var errPanicked = errors.New("grpclimit: handler panicked")

// admit decides the call, whose request message is req (nil for a
// stream). It returns the status error of a refused call, or the context
// for the handler and the function to run with the handler's error when
// the admitted call ends.
func (in *Interceptor) admit(ctx context.Context, method string, req any, setHeader, setTrailer func(metadata.MD) error) (context.Context, func(error), error) {
	attrs := in.pool.Get().(floodgate.Attributes)
	for _, k := range in.attrs {
		if v := k.f(ctx, method); v != "" {
			attrs[k.name] = v
		}
	}
	var a admission.Admission
	if in.reserve != nil {
		a = in.gate.Reserve(ctx, attrs, in.reserve(ctx, method, req))
	} else {
		a = in.gate.Admit(ctx, attrs)
	}
	err := in.report(&a, setHeader, setTrailer)
	if !in.charge || err != nil { // only the charge after the handler needs attrs
		clear(attrs)
		in.pool.Put(attrs)
	}
	if err != nil {
		return ctx, nil, err
	}
	// Each closure holds its own copy of a, so that calls with nothing to
	// settle keep theirs on the stack (TestAllocations).
	switch {
	case in.charge:
		a := a
		parent, _ := ctx.Value(costKey{}).(*usage)
		u := &usage{parent: parent}
		return context.WithValue(ctx, costKey{}, u), func(error) {
			a.End(ctx, false, u.n.Load())
			clear(attrs)
			in.pool.Put(attrs)
		}, nil
	case a.Outcome.Reason == floodgate.ReasonStore:
		return ctx, noop, nil // nothing was charged
	case in.count != CountAll:
		a := a
		return ctx, func(herr error) {
			a.End(ctx, in.failed(herr) == (in.count == CountSuccesses), 0) // the whole charge comes back, or the leases
		}, nil
	case in.leased:
		a := a
		return ctx, func(error) { a.End(ctx, false, 0) }, nil // releases the leases
	}
	return ctx, noop, nil
}

// report sets the call's metadata from its decision and returns the status
// error of a refused call.
func (in *Interceptor) report(a *admission.Admission, setHeader, setTrailer func(metadata.MD) error) error {
	d := &a.Outcome
	if d.Reason == floodgate.ReasonInvalid {
		return status.Error(codes.Internal, "rate limiter cannot decide this call: "+d.Err.Error())
	}
	if d.Reason == floodgate.ReasonStore {
		if d.Allowed {
			return nil
		}
		secs := quota.Seconds(d.RetryAfter)
		md := metadata.Pairs(MetadataRetryAfter, strconv.FormatInt(secs, 10))
		setHeader(md)
		setTrailer(md)
		return withRetry(status.New(codes.Unavailable, "rate limiter unavailable"), time.Duration(secs)*time.Second, nil)
	}
	var md metadata.MD
	if !in.noQuota {
		// The lease's rules are their own decision under ChargeAfter with
		// Concurrency rules (see admission.Admission); their quota is
		// reported too, after the other rules', as httplimit does.
		for _, rules := range [2][]floodgate.RuleDecision{d.Rules, a.Lease.Rules} {
			if pol, lim := in.quota.Fields(rules); pol != "" {
				if md == nil {
					md = metadata.MD{}
				}
				md.Append(MetadataRateLimitPolicy, pol)
				md.Append(MetadataRateLimit, lim)
			}
		}
	}
	if d.Allowed {
		if md != nil {
			setHeader(md)
		}
		return nil
	}
	if md == nil {
		md = metadata.MD{}
	}
	var wait time.Duration
	msg := "rate limit exceeded"
	if d.Never {
		msg = "rate limit exceeded: the call costs more than the limit can ever admit"
	} else {
		secs := quota.Seconds(d.RetryAfter)
		md.Set(MetadataRetryAfter, strconv.FormatInt(secs, 10))
		wait = d.RetryAfter
	}
	setHeader(md)
	setTrailer(md)
	qf := &errdetails.QuotaFailure{}
	a.Violated(func(name string, limit int64) {
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     in.limiter.Name() + "/" + name,
			Description: fmt.Sprintf("limit %d per rule window exceeded", limit),
		})
	})
	return withRetry(status.New(codes.ResourceExhausted, msg), wait, qf)
}

// withRetry adds the retry delay (when positive) and the quota failure (when
// set) to st and returns its error.
func withRetry(st *status.Status, wait time.Duration, qf *errdetails.QuotaFailure) error {
	var details []protoadapt.MessageV1
	if wait > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
	}
	if qf != nil && len(qf.Violations) > 0 {
		details = append(details, qf)
	}
	if len(details) == 0 {
		return st.Err()
	}
	if ds, err := st.WithDetails(details...); err == nil {
		st = ds
	}
	return st.Err()
}
