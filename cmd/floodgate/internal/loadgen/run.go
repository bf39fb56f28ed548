package loadgen

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// maxErrorKinds caps the distinct error messages a run keeps; the rest are
// counted under "other errors".
const maxErrorKinds = 8

// Run drives the service cfg describes until the run ends (see the package
// doc) and returns what it measured. It returns a validation error, without
// sending anything, for a bad Config, and an error when the client cannot be
// set up. When ctx is cancelled the run stops early and Run returns the
// summary of what was measured so far together with ctx's error.
//
// Failed requests (transport errors, timeouts, unexpected answers) are
// counted in Summary.Errors and never end the run.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	cfg = cfg.withDefaults()
	cl, err := newClient(&cfg)
	if err != nil {
		return Summary{}, err
	}
	defer cl.close()

	r := newRun(&cfg, cl, time.Now())
	var prog *progress
	if cfg.Progress != nil {
		prog = startProgress(r)
	}
	if cfg.Rate > 0 {
		r.open(ctx)
	} else {
		r.closed(ctx)
	}
	done := time.Now()
	if prog != nil {
		prog.stop()
	}
	s := r.summary(done)
	return s, ctx.Err()
}

// outcome is what the service answered to one request.
type outcome uint8

const (
	outDenied     outcome = iota // denied by the rules
	outAllowed                   // allowed by the rules
	outFailOpen                  // allowed by the failure policy: the store did not answer
	outFailClosed                // denied by the failure policy
)

// decided is the outcome of a decision made by the rules.
func decided(allowed bool) outcome {
	if allowed {
		return outAllowed
	}
	return outDenied
}

// run is the state of one Run, shared by its workers.
type run struct {
	cfg      *Config
	sessions []session
	start    time.Time // the warm-up starts
	measure  time.Time // the measured part starts
	end      time.Time // no request is issued at or after end
	warm     *recorder // results of the warm-up, shown in progress only
	main     *recorder // results of the measured part
	issued   atomic.Int64
	missed   atomic.Uint64
}

func newRun(cfg *Config, cl client, start time.Time) *run {
	shards := min(cfg.Concurrency, 4*runtime.GOMAXPROCS(0))
	r := &run{
		cfg:     cfg,
		start:   start,
		measure: start.Add(cfg.Warmup),
		end:     start.Add(cfg.Warmup + cfg.Duration),
		warm:    newRecorder(shards),
		main:    newRecorder(shards),
	}
	for i := range cfg.Concurrency {
		r.sessions = append(r.sessions, cl.session(newKeyPicker(cfg, i)))
	}
	return r
}

// claim reports whether a request intended for time t may be issued, taking
// one from the Requests budget when t is in the measured part.
func (r *run) claim(t time.Time) bool {
	if !t.Before(r.end) {
		return false
	}
	if t.Before(r.measure) || r.cfg.Requests == 0 {
		return true
	}
	return r.issued.Add(1) <= r.cfg.Requests
}

// do sends one request for worker w and records its outcome against the
// phase of intended, measuring latency from intended.
func (r *run) do(ctx context.Context, w int, intended time.Time) {
	out, err := r.sessions[w].call(ctx)
	if err != nil && ctx.Err() != nil {
		return // the run was cancelled: not the service's failure
	}
	lat := time.Since(intended)
	rec := r.main
	if intended.Before(r.measure) {
		rec = r.warm
	}
	rec.record(w, lat, out, err)
}

// closed runs the closed model: every worker sends requests back to back.
func (r *run) closed(ctx context.Context) {
	var wg sync.WaitGroup
	for w := range r.sessions {
		wg.Go(func() {
			for ctx.Err() == nil {
				now := time.Now()
				if !r.claim(now) {
					return
				}
				r.do(ctx, w, now)
			}
		})
	}
	wg.Wait()
}

// open runs the open model: a scheduler hands each request's intended send
// time to the first free worker, through a queue as long as there are
// workers, so that a scheduler that falls behind can catch up. When the queue
// stays full until the run's end, the requests still unsent are counted as
// missed.
func (r *run) open(ctx context.Context) {
	jobs := make(chan time.Time, len(r.sessions))
	var wg sync.WaitGroup
	for w := range r.sessions {
		wg.Go(func() {
			for t := range jobs {
				r.do(ctx, w, t)
			}
		})
	}
	defer wg.Wait()
	defer close(jobs)

	interval := float64(time.Second) / r.cfg.Rate
	sleep := time.NewTimer(time.Hour)
	defer sleep.Stop()
	deadline := time.NewTimer(time.Until(r.end))
	defer deadline.Stop()
	for i := int64(0); ; i++ {
		t := r.start.Add(time.Duration(float64(i) * interval))
		if !r.claim(t) {
			return
		}
		if d := time.Until(t); d > 0 {
			sleep.Reset(d)
			select {
			case <-sleep.C:
			case <-ctx.Done():
				return
			}
		}
		select {
		case jobs <- t:
			continue
		case <-ctx.Done():
			return
		case <-deadline.C:
		}
		// Every worker stayed busy until the end: count what was due.
		for ; ; i++ {
			t := r.start.Add(time.Duration(float64(i) * interval))
			if t.Before(r.measure) {
				continue
			}
			if !r.claim(t) {
				return
			}
			r.missed.Add(1)
		}
	}
}

// recorder accumulates the outcomes of one phase, sharded so that workers on
// different CPUs rarely touch the same cache lines. It is safe for concurrent
// use.
type recorder struct {
	shards []recorderShard
	mu     sync.Mutex // guards errs and otherErrs
	errs   map[string]uint64
	other  uint64
}

type recorderShard struct {
	counts  [4]atomic.Uint64 // by outcome
	errors  atomic.Uint64
	latency Histogram
	_       [64]byte // keep neighbouring shards' counters apart
}

func newRecorder(shards int) *recorder {
	return &recorder{shards: make([]recorderShard, max(shards, 1)), errs: map[string]uint64{}}
}

// record counts one outcome for worker w. Latency is kept for answered
// requests only; errors are counted by message.
func (rc *recorder) record(w int, lat time.Duration, out outcome, err error) {
	sh := &rc.shards[w%len(rc.shards)]
	switch {
	case err != nil:
		sh.errors.Add(1)
		rc.mu.Lock()
		msg := err.Error()
		if _, ok := rc.errs[msg]; ok || len(rc.errs) < maxErrorKinds {
			rc.errs[msg]++
		} else {
			rc.other++
		}
		rc.mu.Unlock()
		return
	}
	sh.counts[out].Add(1)
	sh.latency.Record(lat)
}

// tally is a count of outcomes.
type tally struct {
	allowed, denied, failOpen, failClosed, errors uint64
}

// total is every request counted.
func (t tally) total() uint64 {
	return t.allowed + t.denied + t.failOpen + t.failClosed + t.errors
}

// counts returns the outcomes recorded so far.
func (rc *recorder) counts() tally {
	var t tally
	for i := range rc.shards {
		sh := &rc.shards[i]
		t.allowed += sh.counts[outAllowed].Load()
		t.denied += sh.counts[outDenied].Load()
		t.failOpen += sh.counts[outFailOpen].Load()
		t.failClosed += sh.counts[outFailClosed].Load()
		t.errors += sh.errors.Load()
	}
	return t
}

// latency merges the shards' latencies into h.
func (rc *recorder) latency(h *Histogram) {
	for i := range rc.shards {
		h.Merge(&rc.shards[i].latency)
	}
}

// errorCounts returns the errors recorded, most frequent first.
func (rc *recorder) errorCounts() []ErrorCount {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make([]ErrorCount, 0, len(rc.errs)+1)
	for msg, n := range rc.errs {
		out = append(out, ErrorCount{Message: msg, Count: n})
	}
	if rc.other > 0 {
		out = append(out, ErrorCount{Message: "other errors", Count: rc.other})
	}
	sortErrorCounts(out)
	return out
}
