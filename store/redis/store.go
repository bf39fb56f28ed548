package redis

import (
	"cmp"
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
	c         rueidis.Client
	owned     bool // made by New: Close closes it
	r         *rueidisRunner
	run       runner // r, or a coalescer over it
	prefix    string
	tag       HashTag
	batchTime bool
	nodes     *nodes         // per-master breakers, in Cluster
	guard     *failoverGuard // pauses an old Sentinel master's writes (see sentinel.go)
	logger    *slog.Logger
}

var _ store.Store = (*Store)(nil)

// New connects to Redis as opts say (nil for the defaults) and returns the
// store. It fails fast when no server answers.
func New(opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	co, err := clientOption(opts)
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("redis: connect: %w", err)
	}
	s, err := newStore(c, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	s.owned = true
	if sn := opts.Sentinel; sn != nil && !sn.NoFailoverPause {
		s.guard = startFailoverGuard(c, sn, opts.TLS, s.logger)
	}
	return s, nil
}

// NewFromClient returns a store on a caller's rueidis client (a single
// node, Sentinel or Cluster client); opts (nil for the defaults) gives
// everything but the connection, whose fields are ignored. Close leaves
// the client open. Make the client with DisableRetry: a script that may
// have run must not be sent twice.
func NewFromClient(c rueidis.Client, opts *Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("redis: nil client")
	}
	if opts == nil {
		opts = &Options{}
	}
	return newStore(c, opts)
}

func newStore(c rueidis.Client, opts *Options) (*Store, error) {
	s := &Store{c: c, prefix: opts.KeyPrefix, tag: opts.HashTag, batchTime: opts.UseBatchTime, logger: opts.Logger}
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
	r := &rueidisRunner{c: c}
	s.r, s.run = r, r
	if max := cmp.Or(opts.MaxCoalesce, DefaultMaxCoalesce); !r.cluster() && max > 1 {
		s.run = &coalescer{rueidisRunner: r, max: max}
	}
	if err := r.loadAtStart(); err != nil {
		return nil, err
	}
	if r.cluster() {
		s.nodes = newNodes(r, opts.NodeBreaker, s.logger)
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

// Cluster reports whether the store talks to a Redis Cluster. A client
// given cluster seed nodes that are not a Cluster runs on them as on a
// single node, and reports false.
func (s *Store) Cluster() bool { return s.c.Mode() == rueidis.ClientModeCluster }

// Close releases the connections New opened (not a client passed to
// NewFromClient).
func (s *Store) Close() error {
	if s.nodes != nil {
		s.nodes.close()
	}
	if s.guard != nil {
		s.guard.close()
	}
	if s.owned {
		s.c.Close()
	}
	return nil
}

// Apply applies b in one pass: the batch's ops are grouped by Cluster slot
// (one group outside Cluster, or when every key shares a slot), each group
// is one script call, atomic on the server, and the replies are copied
// into the ops. A consume that spans slots and was denied (or failed) on
// one of them gives back what the others charged (compensate). See the
// package documentation.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	b.Allowed = false
	if len(b.Ops) == 0 {
		return nil
	}
	now, ref := int64(-1), time.Now().UnixMicro() // -1: the server's TIME
	if s.batchTime {
		now, ref = b.Now.UnixMicro(), b.Now.UnixMicro()
	}
	mode := int(b.Mode)
	if b.Mode == store.Refund && leasesOnly(b) {
		mode = modeCompensate // idempotent: no spent-ticket record (see store.Refund)
	}
	gs, err := s.exec(ctx, b, s.groups(b), mode, now, ref, nil)
	if err == nil {
		b.Allowed = b.Mode == store.Consume
		for _, g := range gs {
			b.Allowed = b.Allowed && g.c.reply[0] == 1
			s.results(b, g, false)
		}
	}
	if b.Mode == store.Consume && len(gs) > 1 && !b.Allowed {
		s.compensate(ctx, b, gs, now, ref)
	}
	return err
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
	part    bool  // one op of a group taken apart on a migrating slot (see apart)
	waited  bool  // refused for a migrating slot or a loading node, sent again (see settle)
}

// mode is the script mode g's call runs in: a refund's part is a
// compensation, its ticket recorded spent already (see apart).
func (g *group) mode(m int) int {
	if g.part && m == int(store.Refund) {
		return modeCompensate
	}
	return m
}

// groups splits b's ops by Cluster slot, in order of first appearance;
// outside Cluster they are one group.
func (s *Store) groups(b *store.Batch) []*group {
	if s.nodes == nil {
		g := &group{idx: make([]int, len(b.Ops))}
		for i := range g.idx {
			g.idx[i] = i
		}
		return []*group{g}
	}
	var gs []*group
	for i := range b.Ops {
		sl := slotOf(s.tag, b.Ops[i].Scope, b.Ops[i].Key)
		j := 0
		for j < len(gs) && gs[j].slot != sl {
			j++
		}
		if j == len(gs) {
			gs = append(gs, &group{slot: sl})
		}
		gs[j].idx = append(gs[j].idx, i)
	}
	return gs
}

// exec builds and runs the groups' calls, together. A group whose script
// could not find the calendar window holding the server's time is run
// again with windows computed around that time, one whose connection
// broke is sent once more (see retryable), and one Redis refused because
// its slot is migrating or its node loading is sent again within the
// deadline, taken apart if it has several keys (see settle). In Cluster, a
// group whose master's breaker is open is not sent, and every failure is a
// *store.ConfinedError (see nodes). It returns the groups (with those
// taken apart replaced by their parts) and the first error; groups that
// succeeded keep their replies.
func (s *Store) exec(ctx context.Context, b *store.Batch, gs []*group, mode int, now, ref int64, stamps []int64) ([]*group, error) {
	var local int64 // the breakers' clock, read only in Cluster
	if s.nodes != nil {
		local = s.localNow(b)
		s.nodes.due()
	}
	var calls []*call
	for _, g := range gs {
		if s.nodes != nil && !s.nodes.allow(g, local) {
			g.refused = true
			continue
		}
		s.build(&g.c, b, g.idx, g.mode(mode), now, ref, stamps)
		calls = append(calls, &g.c)
	}
	if len(calls) > 0 {
		s.run.run(ctx, calls)
	}
	calls = calls[:0]
	for _, g := range gs {
		if !g.refused && mode != modeCompensate && retryable(ctx, g.c.err) {
			calls = append(calls, &g.c)
		}
	}
	if len(calls) > 0 {
		s.run.run(ctx, calls)
	}
	gs = s.settle(ctx, b, gs, mode, now, ref, stamps)
	s.rename(ctx, b, gs, mode, now, stamps)
	var first error
	for _, g := range gs {
		if g.c.err == nil && g.c.shape.aligned && !missed(&g.c) {
			g.c.reply = expandAligned(&g.c, b, g.idx)
		}
		if g.c.err == nil && len(g.c.reply) != 2+replyPerOp*len(g.idx) {
			g.c.err = fmt.Errorf("redis: unexpected script reply of %d values", len(g.c.reply))
		}
		if s.nodes != nil && !g.refused {
			s.nodes.record(ctx, g, local)
		}
		if g.c.err != nil && first == nil {
			first = g.c.err
			if s.nodes != nil {
				first = confine(g, first)
			}
		}
	}
	return gs, first
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

// rename sends again, named at the server's reading, the calls of gs that
// missed (an aligned window's key named for another window than the one
// holding the server's time: clocks that straddle a boundary, or a call
// sent again after a wait), up to three times.
func (s *Store) rename(ctx context.Context, b *store.Batch, gs []*group, mode int, now int64, stamps []int64) {
	for range 3 {
		var calls []*call
		for _, g := range gs {
			if !g.refused && missed(&g.c) {
				s.build(&g.c, b, g.idx, g.mode(mode), now, g.c.reply[1], stamps)
				calls = append(calls, &g.c)
			}
		}
		if len(calls) == 0 {
			return
		}
		s.run.run(ctx, calls)
	}
}

// missed reports whether c's reply is a miss: an aligned window's key
// named for another window than the one holding the script's time.
func missed(c *call) bool {
	return c.err == nil && len(c.reply) == 2 && c.reply[0] == -1
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
		cg := &group{slot: g.slot}
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
	back, err := s.exec(cctx, b, back, modeCompensate, now, ref, stamps)
	if err != nil {
		s.logger.Warn("floodgate/redis: cross-slot compensation failed; units stay charged until their windows pass", "err", err)
	}
	for _, g := range back {
		if g.c.err == nil {
			s.results(b, g, true)
		}
	}
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.r.ping(ctx)
}
