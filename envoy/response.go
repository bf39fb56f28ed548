package envoy

import (
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// response is a RateLimitResponse under construction. A descriptor status
// is four small messages (the status, its current_limit, its
// duration_until_reset and the unit_multiplier wrapper); they are
// allocated together, one slot per descriptor, and a response of one
// descriptor, the common case, is a single allocation. The messages are
// the response's own: nothing in it is shared with another call.
type response struct {
	msg   *rlsv3.RateLimitResponse
	slots []statusSlot
}

// statusSlot holds the messages of one descriptor's status.
type statusSlot struct {
	ds  rlsv3.RateLimitResponse_DescriptorStatus
	rl  rlsv3.RateLimitResponse_RateLimit
	dur durationpb.Duration
	mul wrapperspb.UInt32Value
}

// singleResponse is a whole response of one descriptor.
type singleResponse struct {
	msg  rlsv3.RateLimitResponse
	ptr  [1]*rlsv3.RateLimitResponse_DescriptorStatus
	slot [1]statusSlot
}

// newResponse returns an OK response with room for n statuses, all unset.
func newResponse(n int) response {
	if n == 1 {
		b := new(singleResponse)
		b.msg.OverallCode = rlsv3.RateLimitResponse_OK
		b.msg.Statuses = b.ptr[:]
		return response{msg: &b.msg, slots: b.slot[:]}
	}
	return response{
		msg: &rlsv3.RateLimitResponse{
			OverallCode: rlsv3.RateLimitResponse_OK,
			Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
		},
		slots: make([]statusSlot, n),
	}
}

// status returns descriptor i's status, setting it on first use.
func (r response) status(i int) *rlsv3.RateLimitResponse_DescriptorStatus {
	ds := r.msg.Statuses[i]
	if ds == nil {
		ds = &r.slots[i].ds
		r.msg.Statuses[i] = ds
	}
	return ds
}

// setLimit sets descriptor i's current_limit to lf's limit, as Envoy's
// API spells it.
func (r response) setLimit(i int, lf *leaf) {
	r.setCurrent(i, lf.rpu, lf.unit, lf.multiplier, lf.name)
}

// setCurrent sets descriptor i's current_limit; a multiplier of 0 is left
// unset.
func (r response) setCurrent(i int, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, multiplier uint32, name string) {
	sl := &r.slots[i]
	sl.rl.RequestsPerUnit, sl.rl.Unit, sl.rl.Name = rpu, unit, name
	if multiplier != 0 {
		sl.mul.Value = multiplier
		sl.rl.UnitMultiplier = &sl.mul
	}
	r.status(i).CurrentLimit = &sl.rl
}

// setReset sets descriptor i's duration_until_reset to d in whole seconds,
// rounded up; a d of 0 or less leaves it unset. Envoy reads only the
// seconds (x-ratelimit-reset), and the reference service answers the
// window's length less the seconds elapsed in it, which is d rounded up.
func (r response) setReset(i int, d time.Duration) {
	if d <= 0 {
		return
	}
	sl := &r.slots[i]
	sl.dur.Seconds = int64((d + time.Second - 1) / time.Second)
	r.status(i).DurationUntilReset = &sl.dur
}
