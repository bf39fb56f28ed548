package floodgate

import (
	"context"
	"math/rand/v2"

	"github.com/floodgate-go/floodgate/internal/algo"
	"github.com/floodgate-go/floodgate/store"
)

// GiveBack returns n units to what each applicable rule counts in now, as
// if a charge of n made now were refunded: a fixed window's count drops
// (never below zero), tokens go back into a bucket (never past its burst),
// a GCRA key's arrival time moves back. It is for callers that reserved
// more than they used and hold no ticket, such as Envoy's is_negative_hits.
//
// A give-back cannot name a window that has passed, so it never reaches
// one. Rules whose current window depends on their stored state, first-hit
// fixed windows and concurrency leases, are left alone, and a sliding
// window takes back at most what its current sub-bucket holds. Like a
// refund, a give-back that cannot be applied leaves the limiter stricter:
// the error is logged and returned. n must not be negative; 0 gives back
// nothing.
func (l *Limiter) GiveBack(ctx context.Context, attrs Attributes, n int64) error {
	if n < 0 {
		return sprintfErr("floodgate: limiter %q: give back %d units: the count must not be negative", l.name, n)
	}
	if n == 0 {
		return nil
	}
	// A ticket of its own: the store marks it spent, so it applies once.
	sh := sheet{call: store.Call{Mode: store.Refund, Cost: n, Ticket: rand.Uint64() | 1, Now: l.clock.Now().UnixMicro()}}
	now := sh.call.Now
	for _, r := range l.rules {
		key := r.keyFor(attrs)
		if key == "" {
			continue
		}
		p, err := r.paramsFor(ctx, attrs)
		if err != nil {
			return err
		}
		if stamp, ok := algo.StampAt(&p, now); ok {
			limit, burst := r.overrides(&p)
			sh.add(r, key, limit, burst, false, stamp)
		}
	}
	if sh.n == 0 {
		return nil
	}
	if err := l.exec(ctx, &sh); err != nil {
		l.logger.WarnContext(ctx, "floodgate: give-back not applied", "limiter", l.name, "err", err)
		return err
	}
	return nil
}
