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
// concurrent use. It is a remote store: put it under a guard (store/guard)
// for a deadline on each call and a circuit breaker. Call Close when done.
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
	r := &rueidisRunner{c: c, loading: make(chan struct{}, 1)}
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
// one of them gives back what the others charged or held (compensate). A
// settle's groups are settled each on its own: a ticket's is recorded
// spent in each group's slot. See the package documentation.
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
		b.Allowed = b.Mode == store.Consume || b.Mode == store.Settle
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
		st := v[replyStatus]
		switch b.Mode {
		case store.Reset:
			op.Result.Allowed = true
			continue
		case store.Refund:
			continue
		case store.Settle: // a peek at 1 but for Allowed: the hold was found
			op.Result.Allowed, op.Result.Never = st == statusAdmitted, g.c.reply[0] == 1 && op.Params.Limit < 1
			op.Result.RetryAfter = micros(v[replyRetry])
			continue
		}
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
