package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// call is one script invocation: one slot's share of a batch.
type call struct {
	keys  []string
	args  []string
	reply []int64
	err   error
}

// runner runs the script with EVALSHA, falling back to EVAL when the server
// does not hold it (a restarted or new node), and fills each call's reply or
// err. Calls of one run go out together (pipelined) and may reach
// different nodes.
type runner interface {
	run(ctx context.Context, calls []*call)
	// cluster reports whether calls go to a Redis Cluster, so that a
	// batch is split by slot.
	cluster() bool
	// ping checks that Redis answers.
	ping(ctx context.Context) error
	// slots reads a Cluster's slot map (CLUSTER SLOTS).
	slots(ctx context.Context) ([]slotRange, error)
	// config returns a configuration parameter's value on each node that
	// lets it be read, by address.
	config(ctx context.Context, name string) (map[string]string, error)
	close()
}

// serverError is an error reply from Redis (as opposed to a failure to get
// any reply).
type serverError struct{ msg string }

func (e *serverError) Error() string { return "redis: " + e.msg }

func isNoScript(err error) bool {
	if err == nil {
		return false
	}
	var se *serverError
	return errors.As(err, &se) && strings.HasPrefix(se.msg, "NOSCRIPT")
}

// rueidisRunner runs scripts on a rueidis client, whose auto-pipelining
// makes concurrent calls share round trips.
type rueidisRunner struct {
	c     rueidis.Client
	owned bool
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

func (r *rueidisRunner) close() {
	if r.owned {
		r.c.Close()
	}
}

func (r *rueidisRunner) cmd(c *call, eval bool) rueidis.Completed {
	if eval {
		return r.c.B().Eval().Script(scriptSrc).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
	}
	return r.c.B().Evalsha().Sha1(scriptSHA).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
}

// do runs c alone, with EVAL if the server lacks the script, and returns
// the script's raw reply.
func (r *rueidisRunner) do(ctx context.Context, c *call) (string, error) {
	s, err := text(r.c.Do(ctx, r.cmd(c, false)))
	if isNoScript(err) {
		s, err = text(r.c.Do(ctx, r.cmd(c, true)))
	}
	return s, err
}

func (r *rueidisRunner) run(ctx context.Context, calls []*call) {
	if len(calls) == 1 {
		c := calls[0]
		c.reply, c.err = decodeReply(r.do(ctx, c))
		return
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = r.cmd(c, false)
	}
	var again []*call
	for i, res := range r.c.DoMulti(ctx, cmds...) {
		if fill(calls[i], res); isNoScript(calls[i].err) {
			again = append(again, calls[i])
		}
	}
	if len(again) == 0 {
		return
	}
	cmds = cmds[:0]
	for _, c := range again {
		cmds = append(cmds, r.cmd(c, true))
	}
	for i, res := range r.c.DoMulti(ctx, cmds...) {
		fill(again[i], res)
	}
}

// fill decodes res into c's reply or err.
func fill(c *call, res rueidis.RedisResult) { c.reply, c.err = decodeReply(text(res)) }

// text returns res's string, or its error (a Redis error reply as a
// *serverError).
func text(res rueidis.RedisResult) (string, error) {
	s, err := res.ToString()
	if re, ok := rueidis.IsRedisErr(err); ok {
		err = &serverError{msg: re.Error()}
	}
	return s, err
}

// decodeReply returns the reply to a call of one batch: its numbers, or
// its error.
func decodeReply(s string, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	var replies [1][]int64
	var errs [1]error
	if err := splitReply(s, replies[:], errs[:]); err != nil {
		return nil, err
	}
	return replies[0], errs[0]
}

// splitReply reads the script's reply to a call of len(replies) batches
// into each batch's numbers or error (a *serverError). The reply is
// little-endian doubles, integers all: for each batch a count n, then
// n numbers; a failed batch's count is -1 - the length of its error
// message, and the messages follow the numbers, in order.
func splitReply(s string, replies [][]int64, errs []error) error {
	pos, failed := 0, 0
	// One array holds every batch's numbers (at most what the reply holds
	// beyond the counts); each batch gets its own part of it.
	all := make([]int64, 0, max(0, len(s)/8-len(replies)))
	for i := range replies {
		if len(s)-pos < 8 {
			return errShortReply
		}
		n := replyNumber(s[pos:])
		pos += 8
		if n < 0 {
			failed++
			continue
		}
		if int64(len(s)-pos)/8 < n {
			return errShortReply
		}
		start := len(all)
		for j := range int(n) {
			all = append(all, replyNumber(s[pos+8*j:]))
		}
		replies[i], errs[i] = all[start:len(all):len(all)], nil
		pos += 8 * int(n)
	}
	if failed == 0 {
		if pos != len(s) {
			return errLongReply
		}
		return nil
	}
	// The messages of the failed batches, in order, after the numbers.
	msgs := pos
	pos = 0
	for i := range replies {
		n := replyNumber(s[pos:])
		pos += 8
		if n >= 0 {
			pos += 8 * int(n)
			continue
		}
		m := int(-1 - n)
		if len(s)-msgs < m {
			return errShortReply
		}
		replies[i], errs[i] = nil, &serverError{msg: strings.Clone(s[msgs : msgs+m])}
		msgs += m
	}
	if msgs != len(s) {
		return errLongReply
	}
	return nil
}

// replyNumber reads the number (a double holding an integer) at the start
// of s.
func replyNumber(s string) int64 {
	return int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[:8]))))
}

var (
	errShortReply = errors.New("redis: script reply too short")
	errLongReply  = errors.New("redis: script reply too long")
)

// goRedisRunner runs scripts on a go-redis client.
type goRedisRunner struct {
	c goredis.Scripter
}

func (r *goRedisRunner) cluster() bool {
	_, ok := r.c.(*goredis.ClusterClient)
	return ok
}

// ping pings a client that can; a client that cannot (a go-redis
// Scripter without Ping) counts as answering.
func (r *goRedisRunner) ping(ctx context.Context) error {
	if p, ok := r.c.(interface {
		Ping(context.Context) *goredis.StatusCmd
	}); ok {
		return p.Ping(ctx).Err()
	}
	return nil
}

// goRedisDoer is what the store asks of a go-redis Cluster client beyond
// scripts: plain commands through an interface, so that a binary which
// never makes a go-redis client does not link go-redis's client code (7 MB
// of a 37 MB floodgate when ClusterShards and ForEachShard were called).
type goRedisDoer interface {
	Do(ctx context.Context, args ...any) *goredis.Cmd
}

// slots reads the slot map with CLUSTER SLOTS.
func (r *goRedisRunner) slots(ctx context.Context) ([]slotRange, error) {
	if !r.cluster() {
		return nil, errors.New("redis: not a Cluster client")
	}
	entries, err := r.c.(goRedisDoer).Do(ctx, "CLUSTER", "SLOTS").Slice()
	if err != nil {
		return nil, err
	}
	out := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		f, _ := e.([]any)
		if len(f) < 3 {
			return nil, fmt.Errorf("redis: CLUSTER SLOTS: unexpected entry %v", e)
		}
		start, ok1 := f[0].(int64)
		end, ok2 := f[1].(int64)
		m, _ := f[2].([]any)
		if !ok1 || !ok2 || len(m) < 2 {
			return nil, fmt.Errorf("redis: CLUSTER SLOTS: unexpected entry %v", e)
		}
		host, ok1 := m[0].(string)
		port, ok2 := m[1].(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("redis: CLUSTER SLOTS: unexpected master %v", m)
		}
		out = append(out, slotRange{start: int(start), end: int(end), master: hostPort(host, port), replicas: len(f) - 3})
	}
	return out, nil
}

// config asks one node, the one go-redis sends a keyless command to: the
// store never calls go-redis's ForEachShard, which would link the whole
// Cluster client (see goRedisDoer).
func (r *goRedisRunner) config(ctx context.Context, name string) (map[string]string, error) {
	if !r.cluster() {
		return nil, errors.New("redis: not a Cluster client")
	}
	reply, err := r.c.(goRedisDoer).Do(ctx, "CONFIG", "GET", name).Result()
	if err != nil {
		return nil, err
	}
	// RESP3 answers a map, RESP2 a flat list of names and values.
	var v any
	switch m := reply.(type) {
	case map[any]any:
		v = m[name]
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if m[i] == name {
				v = m[i+1]
			}
		}
	}
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("redis: CONFIG GET %s: unexpected reply %v", name, reply)
	}
	return map[string]string{"a node": s}, nil
}

func (r *goRedisRunner) close() {}

func (r *goRedisRunner) run(ctx context.Context, calls []*call) {
	if len(calls) == 1 {
		r.one(ctx, calls[0])
		return
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() { r.one(ctx, c) })
	}
	wg.Wait()
}

func (r *goRedisRunner) one(ctx context.Context, c *call) {
	args := make([]any, len(c.args))
	for i, a := range c.args {
		args[i] = a
	}
	c.reply, c.err = goRedisReply(r.c.EvalSha(ctx, scriptSHA, c.keys, args...))
	if isNoScript(c.err) {
		c.reply, c.err = goRedisReply(r.c.Eval(ctx, scriptSrc, c.keys, args...))
	}
}

func goRedisReply(cmd *goredis.Cmd) ([]int64, error) {
	s, err := cmd.Text()
	var re goredis.Error
	if errors.As(err, &re) {
		return nil, &serverError{msg: re.Error()}
	}
	return decodeReply(s, err)
}
