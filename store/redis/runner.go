package redis

import (
	"context"
	"encoding/binary"
	"errors"
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
