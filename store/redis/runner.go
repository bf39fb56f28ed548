package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// call is one script invocation: one slot's share of a batch.
type call struct {
	keys  []string
	args  []string
	reply []int64
	err   error

	shape shape
	spans []int64 // an aligned call's windows, start and end (µs) per op
}

// shape is what reading a call's reply takes knowing of what was sent:
// the reply's length follows from it (see scripts/apply.lua).
type shape struct {
	aligned bool  // built by buildAligned: expandAligned reads the reply
	ops     int   // the batch's ops
	now     int64 // the time the batch was sent with (µs), or -1: the server's
}

// runner runs script calls and fills each call's reply or err: a
// rueidisRunner, or a coalescer over one. Calls of one run go out together
// (pipelined) and may reach different nodes.
type runner interface {
	run(ctx context.Context, calls []*call)
}

// serverError is an error reply from Redis (as opposed to a failure to get
// any reply).
type serverError struct{ msg string }

func (e *serverError) Error() string { return "redis: " + e.msg }

// errReply is the error of a reply that is not what the script answers.
var errReply = errors.New("redis: unexpected script reply")

// isNoFunction reports whether err says the node does not hold the
// library (restarted empty, a replica promoted that never had it, a new
// node, FUNCTION FLUSH).
func isNoFunction(err error) bool {
	var se *serverError
	return errors.As(err, &se) && strings.Contains(se.msg, "Function not found")
}

// rueidisRunner runs the library's function on a rueidis client with
// FCALL, and loads the library (see load). The client's auto-pipelining
// makes concurrent calls share round trips.
type rueidisRunner struct {
	c       rueidis.Client
	loading chan struct{} // holds a token while a load runs
	loads   atomic.Uint64 // loads tried: a call reads it before it is sent (see load)
}

func (r *rueidisRunner) cluster() bool { return r.c.Mode() == rueidis.ClientModeCluster }

func (r *rueidisRunner) ping(ctx context.Context) error {
	return r.c.Do(ctx, r.c.B().Ping().Build()).Error()
}

func (r *rueidisRunner) slots(ctx context.Context) ([]slotRange, error) {
	entries, err := r.c.Do(ctx, r.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("redis: CLUSTER SLOTS: unexpected entry (%v)", err)
		}
		start, err1 := f[0].AsInt64()
		end, err2 := f[1].AsInt64()
		m, err3 := f[2].ToArray()
		if err := errors.Join(err1, err2, err3); err != nil || len(m) < 2 {
			return nil, fmt.Errorf("redis: CLUSTER SLOTS: unexpected entry (%v)", err)
		}
		host, err1 := m[0].ToString()
		port, err2 := m[1].AsInt64()
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("redis: CLUSTER SLOTS: unexpected master (%v)", err)
		}
		out = append(out, slotRange{start: int(start), end: int(end), master: hostPort(host, port), replicas: len(f) - 3})
	}
	return out, nil
}

func (r *rueidisRunner) config(ctx context.Context, name string) (map[string]string, error) {
	out := map[string]string{}
	var last error
	for addr, c := range r.c.Nodes() {
		m, err := c.Do(ctx, c.B().ConfigGet().Parameter(name).Build()).AsStrMap()
		if err != nil {
			last = err
			continue
		}
		if v, ok := m[name]; ok {
			out[addr] = v
		}
	}
	if len(out) == 0 && last != nil {
		return nil, last
	}
	return out, nil
}

func (r *rueidisRunner) cmd(c *call) rueidis.Completed {
	return r.c.B().Fcall().Function(function).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
}

// load loads the library on every node the client knows (FUNCTION LOAD
// REPLACE: loading it again changes nothing), unless a load was tried
// since the caller read loads (since): calls that found no function
// together share one load. A replica refuses it (READONLY) and gets it from its
// master. It returns the first other error.
func (r *rueidisRunner) load(ctx context.Context, since uint64) error {
	select {
	case r.loading <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.loading }()
	if r.loads.Load() != since {
		return nil
	}
	defer r.loads.Add(1)
	var first error
	for _, n := range r.c.Nodes() {
		err := serverErr(n.Do(ctx, n.B().FunctionLoad().Replace().FunctionCode(library).Build()).Error())
		var se *serverError
		if err != nil && !(errors.As(err, &se) && strings.HasPrefix(se.msg, "READONLY")) && first == nil {
			first = err
		}
	}
	return first
}

// loadAtStart loads the library on every node, so that the first
// decisions need not, and so that a server without Functions (before
// Redis 7.0) is an error at construction naming its version. Any other
// failure is left to the calls, which load the library when a node lacks
// it.
func (r *rueidisRunner) loadAtStart() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var se *serverError
	if err := r.load(ctx, r.loads.Load()); errors.As(err, &se) && strings.Contains(strings.ToLower(se.msg), "unknown command") {
		version := "?"
		if info, err := r.c.Do(ctx, r.c.B().Info().Section("server").Build()).ToString(); err == nil {
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
					version = v
				}
			}
		}
		return fmt.Errorf("redis: the server (Redis %s) has no Functions (FUNCTION LOAD): floodgate needs Redis 7.0 or later, or Valkey", version)
	}
	return nil
}

// eval sends the calls together (pipelined) with FCALL and returns their
// raw results in order.
func (r *rueidisRunner) eval(ctx context.Context, calls []*call) []rueidis.RedisResult {
	if len(calls) == 1 {
		return []rueidis.RedisResult{r.c.Do(ctx, r.cmd(calls[0]))}
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = r.cmd(c)
	}
	return r.c.DoMulti(ctx, cmds...)
}

// run fills each call's reply or err: each call carries one batch.
func (r *rueidisRunner) run(ctx context.Context, calls []*call) {
	for i, res := range r.eval(ctx, calls) {
		var replies [1][]int64
		var errs [1]error
		err := decode(res, []shape{calls[i].shape}, replies[:], errs[:])
		if err == nil {
			err = errs[0]
		}
		calls[i].reply, calls[i].err = replies[0], err
	}
}

// serverErr returns err, as a *serverError when it is an error reply.
func serverErr(err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok {
		return &serverError{msg: re.Error()}
	}
	return err
}

// decode reads the script's reply to a call of the batches shaped as
// shapes (see scripts/apply.lua) into each batch's numbers, as decide
// gives them or an aligned batch's now and counts, or its error (a
// *serverError); it returns the call's own error.
func decode(res rueidis.RedisResult, shapes []shape, replies [][]int64, errs []error) error {
	elems, err := res.ToArray()
	if err != nil {
		return serverErr(err)
	}
	bad := func(what string, err error) error {
		return fmt.Errorf("%w of %d values for %d batches: %s: %v", errReply, len(elems), len(shapes), what, err)
	}
	if len(elems) == 0 {
		return bad("empty", nil)
	}
	server, err := elems[0].AsInt64()
	if err != nil {
		return bad("the server's time", err)
	}
	now := func(sh shape) int64 { // an aligned batch's time
		if sh.now >= 0 {
			return sh.now
		}
		return server
	}
	i := 1
	ints := func(n int) ([]int64, error) {
		if n > len(elems)-i {
			return nil, bad("too short", nil)
		}
		r := make([]int64, n)
		for j := range r {
			if r[j], err = elems[i+j].AsInt64(); err != nil {
				return nil, bad("a number", err)
			}
		}
		i += n
		return r, nil
	}
	for b, sh := range shapes {
		if i == len(elems) {
			return bad("too short", nil)
		}
		if e := elems[i].Error(); e != nil {
			errs[b] = serverErr(e) // such as "ERR ..." or "WRONGTYPE ..."
			i++
			continue
		}
		first, err := elems[i].AsInt64()
		if err != nil {
			return bad("a number", err)
		}
		var r []int64
		switch {
		case sh.aligned && first == -1: // a miss
			i++
			r = []int64{-1, now(sh)}
		case sh.aligned:
			if r, err = ints(sh.ops); err != nil {
				return err
			}
			r = append([]int64{now(sh)}, r...)
		case first == -1: // a miss: -1, now
			r, err = ints(2)
		default:
			r, err = ints(2 + replyPerOp*sh.ops)
		}
		if err != nil {
			return err
		}
		replies[b] = r
	}
	if i != len(elems) {
		return bad("too long", nil)
	}
	return nil
}
