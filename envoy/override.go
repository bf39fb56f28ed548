package envoy

import (
	"context"
	"strconv"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A descriptor may carry its own limit (Envoy's limit override, set in the
// route's rate limit actions). Like the reference service, floodgate then
// uses that limit, in an epoch-aligned fixed window of the given unit, for
// the descriptor's entries, and does not consult the domain's tree. Each
// distinct window gets a limiter of one rule, made on first use, whose
// limit is read from the request.

const (
	overrideRule      = "override"
	overrideLimitAttr = "override.limit"
	maxOverrides      = 256 // distinct override windows per configuration
)

type overrideKey struct {
	domain string
	window time.Duration
}

// override returns the leaf and limiter of a descriptor's own limit.
func (s *Service) override(st *state, d *domain, ov *commonv3.RateLimitDescriptor_RateLimitOverride) (*leaf, *floodgate.Limiter, error) {
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(ov.GetUnit())
	secs, ok := unitSeconds[unit]
	if !ok {
		return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor limit override: unknown unit %v", ov.GetUnit())
	}
	lf := &leaf{
		path: overrideRule, rule: overrideRule, override: true,
		rpu: ov.GetRequestsPerUnit(), unit: unit, algorithm: floodgate.FixedWindow,
	}
	mult := int64(1)
	if m := ov.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		mult = int64(m.GetValue())
		lf.multiplier = m.GetValue()
	}
	if secs*mult > maxWindowSeconds {
		return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor limit override: window of %d %v is too long", mult, unit)
	}
	lf.window = time.Duration(secs*mult) * time.Second
	if lf.rpu == 0 {
		return lf, nil, nil // refuses everything: no limiter needed
	}
	k := overrideKey{d.name, lf.window}
	st.mu.Lock()
	defer st.mu.Unlock()
	if l := st.overrides[k]; l != nil {
		return lf, l, nil
	}
	if len(st.overrides) >= maxOverrides {
		return nil, nil, status.Errorf(codes.ResourceExhausted, "more than %d distinct limit override windows", maxOverrides)
	}
	opts := st.opts.Limiter
	l, err := floodgate.New(limiterName(d.name)+"."+overrideRule+"-"+strconv.FormatInt(secs*mult, 10)+"s", st.store, []floodgate.Rule{{
		Name: overrideRule, Algorithm: floodgate.FixedWindow, Align: floodgate.AlignClock,
		Limit: 1, Window: lf.window, Key: []string{overrideRule},
		LimitFunc: func(_ context.Context, attrs floodgate.Attributes) (int64, error) {
			return strconv.ParseInt(attrs[overrideLimitAttr], 10, 64)
		},
	}}, &opts)
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "descriptor limit override: %v", err)
	}
	if st.overrides == nil {
		st.overrides = make(map[overrideKey]*floodgate.Limiter)
	}
	st.overrides[k] = l
	return lf, l, nil
}
