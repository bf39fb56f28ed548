package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

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
