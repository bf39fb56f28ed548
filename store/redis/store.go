package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/redis/rueidis"
)

// Store is the Redis implementation of store.Store. It is safe for
// concurrent use. It is a remote store: limiters give each call a deadline
// and a circuit breaker. Call Close when done.
type Store struct {
	run       runner
	prefix    string
	tag       HashTag
	batchTime bool
	nodes     *nodes // per-master breakers, in Cluster
	logger    *slog.Logger
}

var _ store.Store = (*Store)(nil)

// New connects to Redis as opts say (nil for the defaults) and returns the
// store. It fails fast when no server answers.
func New(opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	s := &Store{prefix: opts.KeyPrefix, tag: opts.HashTag, batchTime: opts.UseBatchTime, logger: opts.Logger}
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(s.prefix, "{}") {
		return nil, fmt.Errorf("redis: key prefix %q must not contain '{' or '}'", s.prefix)
	}
	if s.tag != TagRule && s.tag != TagLimiter {
		return nil, fmt.Errorf("redis: unknown hash tag %d", int(s.tag))
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	switch {
	case opts.Client != nil:
		s.run = coalesced(&rueidisRunner{c: opts.Client}, opts.MaxCoalesce)
	default:
		co, err := clientOption(opts)
		if err != nil {
			return nil, err
		}
		c, err := rueidis.NewClient(co)
		if err != nil {
			return nil, fmt.Errorf("redis: connect: %w", err)
		}
		s.run = coalesced(&rueidisRunner{c: c, owned: true}, opts.MaxCoalesce)
	}
	if s.run.cluster() {
		s.nodes = newNodes(s.run, opts.NodeBreaker, s.logger)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.nodes.check(ctx)
		cancel()
	}
	return s, nil
}

// clientOption turns opts into a rueidis configuration.
func clientOption(opts *Options) (rueidis.ClientOption, error) {
	var co rueidis.ClientOption
	switch {
	case opts.URL != "":
		var err error
		if co, err = rueidis.ParseURL(opts.URL); err != nil {
			return co, fmt.Errorf("redis: url: %w", err)
		}
	case len(opts.Cluster) > 0:
		co.InitAddress = append([]string(nil), opts.Cluster...)
	case opts.Sentinel != nil:
	default:
		co.InitAddress = []string{"127.0.0.1:6379"}
	}
	if len(opts.Cluster) > 0 && opts.URL != "" {
		co.InitAddress = append(co.InitAddress, opts.Cluster...)
	}
	if sn := opts.Sentinel; sn != nil {
		if sn.Master == "" || len(sn.Addrs) == 0 {
			return co, errors.New("redis: sentinel needs a master name and at least one address")
		}
		co.InitAddress = append([]string(nil), sn.Addrs...)
		co.Sentinel.MasterSet = sn.Master
		co.Sentinel.Username, co.Sentinel.Password = sn.Username, sn.Password
		co.Sentinel.TLSConfig = opts.TLS
	}
	if opts.Username != "" {
		co.Username = opts.Username
	}
	if opts.Password != "" {
		co.Password = opts.Password
	}
	if opts.DB != 0 {
		co.SelectDB = opts.DB
	}
	if opts.TLS != nil {
		co.TLSConfig = opts.TLS
	}
	co.Dialer.Timeout = 5 * time.Second
	if opts.DialTimeout > 0 {
		co.Dialer.Timeout = opts.DialTimeout
	}
	if opts.PipelineMultiplex != 0 {
		co.PipelineMultiplex = opts.PipelineMultiplex
	}
	co.MaxFlushDelay = opts.MaxFlushDelay
	co.DisableCache = true // server-assisted caching is not used
	// A script that may have run must not be sent twice.
	co.DisableRetry = true
	return co, nil
}

// Close releases the connections the store opened (not a client passed in
// Options).
func (s *Store) Close() error {
	if s.nodes != nil {
		s.nodes.close()
	}
	s.run.close()
	return nil
}

// Apply applies b. On a single node (and in Cluster when all of b's keys
// share a slot) it is one script call, atomic on the server. See the package
// documentation for batches that span Cluster slots.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	if len(b.Ops) == 0 {
		return nil
	}
	b.Allowed = false
	return s.apply(ctx, b)
}

// localNow is the local clock reading (ns) the Cluster breakers work with.
func (s *Store) localNow(b *store.Batch) int64 {
	if s.batchTime {
		return b.Now.UnixNano()
	}
	return time.Now().UnixNano()
}

// retryable reports whether a call that failed with err is sent once more:
// a connection error while ctx still has time. A connection the server
// closed (a restart, a failover) is found dead only when next written to,
// so the first call on each one fails. The call may have run before the
// connection broke; running it again then charges twice, which is stricter,
// never looser, for every mode but compensate (whose second run would give
// back twice), and a refund's spent-ticket record makes its second run a
// no-op.
func retryable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var se *serverError
	return !errors.As(err, &se)
}

// group is the ops of a batch that share a slot, with their script call.
type group struct {
	idx     []int
	c       call
	slot    uint16
	node    *node // the slot's master, in Cluster once known
	refused bool  // by the master's open breaker: the call did not go out
}

// single is what a batch on a single node needs, in one allocation: its
// one group and the backing arrays of the group's op indexes and keys and
// of the call list (a batch with more ops or keys grows past them).
type single struct {
	g     group
	gs    [1]*group
	calls [1]*call
	idx   [8]int
	keys  [8]string
}

// apply runs b on Redis: one call per slot its keys occupy.
func (s *Store) apply(ctx context.Context, b *store.Batch) error {
	now, ref := int64(-1), time.Now().UnixMicro()
	if s.batchTime {
		ref = b.Now.UnixMicro()
		now = ref
	}
	mode := int(b.Mode)
	if b.Mode == store.Refund && leasesOnly(b) {
		mode = modeCompensate // idempotent: no spent-ticket record (see store.Refund)
	}
	if !s.run.cluster() {
		one := &single{}
		g := &one.g
		g.idx, g.c.keys = one.idx[:0], one.keys[:0]
		for i := range b.Ops {
			g.idx = append(g.idx, i)
		}
		one.gs[0] = g
		if err := s.exec(ctx, b, one.gs[:], one.calls[:], mode, now, ref, nil); err != nil {
			return err
		}
		b.Allowed = g.c.reply[0] == 1
		s.results(b, g, false)
		return nil
	}
	gs := s.groups(b)
	if err := s.exec(ctx, b, gs, make([]*call, len(gs)), mode, now, ref, nil); err != nil {
		if b.Mode == store.Consume {
			s.compensate(ctx, b, gs, now, ref)
		}
		return err
	}
	b.Allowed = b.Mode == store.Consume
	for _, g := range gs {
		b.Allowed = b.Allowed && g.c.reply[0] == 1
		s.results(b, g, false)
	}
	if b.Mode == store.Consume && !b.Allowed && len(gs) > 1 {
		s.compensate(ctx, b, gs, now, ref)
	}
	return nil
}

// groups splits b's ops by Cluster slot, in order of first appearance.
func (s *Store) groups(b *store.Batch) []*group {
	var gs []*group
	var slots []uint16
	for i := range b.Ops {
		sl := slotOf(s.tag, b.Ops[i].Scope, b.Ops[i].Key)
		j := 0
		for j < len(slots) && slots[j] != sl {
			j++
		}
		if j == len(slots) {
			slots = append(slots, sl)
			gs = append(gs, &group{slot: sl})
		}
		gs[j].idx = append(gs[j].idx, i)
	}
	return gs
}

// exec builds and runs the groups' calls; calls has room for one per
// group. A group whose script could not find the calendar window holding
// the server's time is run again with windows computed around that time.
// In Cluster, a group whose master's breaker is open is not sent, and every
// failure is a *store.ConfinedError (see nodes). The first error is
// returned; groups that succeeded keep their replies.
func (s *Store) exec(ctx context.Context, b *store.Batch, gs []*group, calls []*call, mode int, now, ref int64, stamps []int64) error {
	var local int64 // the breakers' clock
	nodes := s.guard()
	if nodes != nil {
		local = s.localNow(b)
		nodes.due()
	}
	run := calls[:0]
	for _, g := range gs {
		if nodes != nil && !nodes.allow(g, local) {
			g.refused = true
			continue
		}
		s.build(&g.c, b, g.idx, mode, now, ref, stamps)
		run = append(run, &g.c)
	}
	if len(run) > 0 {
		s.run.run(ctx, run)
	}
	var again []*call
	for _, g := range gs {
		switch {
		case g.refused:
		case g.c.err == nil && len(g.c.reply) >= 2 && g.c.reply[0] == -1:
			s.build(&g.c, b, g.idx, mode, now, g.c.reply[1], stamps)
			again = append(again, &g.c)
		case mode != modeCompensate && retryable(ctx, g.c.err):
			again = append(again, &g.c)
		}
	}
	if len(again) > 0 {
		s.run.run(ctx, again)
	}
	var first error
	for _, g := range gs {
		err := g.c.err
		if err == nil && len(g.c.reply) != 2+replyPerOp*len(g.idx) {
			err = fmt.Errorf("redis: unexpected script reply of %d values", len(g.c.reply))
			g.c.err = err
		}
		if nodes != nil && !g.refused {
			nodes.record(ctx, g, local)
		}
		if err != nil && first == nil {
			first = err
			if nodes != nil {
				first = confine(g, err)
			}
		}
	}
	return first
}

// guard returns the per-master breakers when the store talks to a Cluster.
func (s *Store) guard() *nodes {
	if s.nodes != nil && s.run.cluster() {
		return s.nodes
	}
	return nil
}

// results copies a group's reply into its ops. With statusOnly, only the
// remaining units and reset time are taken (a compensation's reply).
func (s *Store) results(b *store.Batch, g *group, statusOnly bool) {
	r := g.c.reply[2:]
	for j, i := range g.idx {
		v := r[j*replyPerOp : (j+1)*replyPerOp]
		op := &b.Ops[i]
		op.Result.Remaining, op.Result.ResetAfter = v[replyRemaining], micros(v[replyReset])
		if statusOnly {
			op.Stamp = 0
			continue
		}
		if b.Mode == store.Refund || b.Mode == store.Reset {
			if b.Mode == store.Reset {
				op.Result.Allowed = true
			}
			continue
		}
		st := v[replyStatus]
		op.Result.Allowed = st == statusAdmitted || st == statusCharged
		op.Result.Never, op.Result.RetryAfter = st == statusNever, micros(v[replyRetry])
		if b.Mode == store.Record || st == statusCharged {
			op.Stamp = v[replyStamp]
		}
	}
}

// compensate gives back what the groups of a cross-slot consume took when
// the batch as a whole was denied (or failed). A compensation that cannot
// be applied leaves the units charged: stricter, never looser.
func (s *Store) compensate(ctx context.Context, b *store.Batch, gs []*group, now, ref int64) {
	stamps := make([]int64, len(b.Ops))
	var back []*group
	for _, g := range gs {
		if g.c.err != nil || g.c.reply[0] != 1 {
			continue
		}
		cg := &group{}
		r := g.c.reply[2:]
		for j, i := range g.idx {
			if v := r[j*replyPerOp : (j+1)*replyPerOp]; v[replyStatus] == statusCharged {
				cg.idx = append(cg.idx, i)
				stamps[i] = v[replyStamp]
			}
		}
		if len(cg.idx) > 0 {
			back = append(back, cg)
		}
	}
	if len(back) == 0 {
		return
	}
	// The compensation must land even when the caller's deadline has
	// passed, or units stay charged for a denied decision.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := s.exec(cctx, b, back, make([]*call, len(back)), modeCompensate, now, ref, stamps); err != nil {
		s.logger.Warn("floodgate/redis: cross-slot compensation failed; units stay charged until their windows pass", "err", err)
	}
	for _, g := range back {
		if g.c.err == nil {
			s.results(b, g, true)
		}
	}
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// coalesced wraps a fresh client's runner in a coalescer when it serves a
// single node (or a Sentinel master) and maxCoalesce allows more than one
// decision per call.
func coalesced(r *rueidisRunner, maxCoalesce int) runner {
	if maxCoalesce == 0 {
		maxCoalesce = DefaultMaxCoalesce
	}
	if r.cluster() || maxCoalesce <= 1 {
		return r
	}
	return &coalescer{rueidisRunner: r, max: maxCoalesce}
}

// Ping checks that Redis answers. A store that has not yet connected
// returns the last connection error.
func (s *Store) Ping(ctx context.Context) error {
	return s.run.ping(ctx)
}
