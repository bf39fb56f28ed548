package loadgen

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Summary is what a run measured in its measured part (never the warm-up).
type Summary struct {
	// Config is the run's configuration with defaults applied.
	Config Config

	// Requests is the number of requests answered or failed:
	// Allowed + Denied + FailOpen + FailClosed + Errors.
	Requests uint64
	// Allowed and Denied count the decisions of the rules: HTTP
	// "allowed": true or false, gRPC OK or OVER_LIMIT.
	Allowed, Denied uint64
	// FailOpen and FailClosed count the decisions of the failure policy,
	// made because the service's store did not answer (HTTP "reason":
	// "store"). Envoy's gRPC API does not tell them apart: over gRPC they
	// are counted as Allowed and Denied.
	FailOpen, FailClosed uint64
	// Errors counts the requests that got no decision: transport errors,
	// timeouts, non-200 answers and unexpected bodies or codes.
	Errors uint64
	// ErrorKinds counts Errors by message, most frequent first.
	ErrorKinds []ErrorCount
	// Missed counts, in the open model, the requests due before the end of
	// the run that could not be sent because every worker was still busy;
	// a non-zero value means the offered rate was not reached.
	Missed uint64

	// Elapsed is the time from the start of the measured part until its last
	// request finished.
	Elapsed time.Duration
	// Throughput is Requests per second of Elapsed.
	Throughput float64

	// Latency holds the latency of every answered request (errors
	// excluded), from the intended send time in the open model and from the
	// actual send time in the closed model.
	Latency *Histogram
}

// ErrorCount is how many times one error message was seen.
type ErrorCount struct {
	Message string `json:"message"`
	Count   uint64 `json:"count"`
}

func sortErrorCounts(es []ErrorCount) {
	slices.SortFunc(es, func(a, b ErrorCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
}

// summary collects the measured part's results; done is when the last worker
// finished.
func (r *run) summary(done time.Time) Summary {
	s := Summary{Config: *r.cfg, Latency: new(Histogram)}
	t := r.main.counts()
	s.Allowed, s.Denied, s.FailOpen, s.FailClosed, s.Errors = t.allowed, t.denied, t.failOpen, t.failClosed, t.errors
	s.Requests = t.total()
	s.ErrorKinds = r.main.errorCounts()
	s.Missed = r.missed.Load()
	r.main.latency(s.Latency)
	s.Elapsed = max(done.Sub(r.measure), 0)
	if s.Elapsed > 0 {
		s.Throughput = float64(s.Requests) / s.Elapsed.Seconds()
	}
	return s
}

// Format writes s as a short human-readable report.
func (s Summary) Format(w io.Writer) error {
	c := s.Config
	var b strings.Builder
	fmt.Fprintf(&b, "target      %s %s", c.Target, c.Addr)
	if c.Target == GRPC {
		fmt.Fprintf(&b, "  domain %q", c.Domain)
	} else {
		fmt.Fprintf(&b, "  limiter %q", c.Limiter)
	}
	fmt.Fprintf(&b, "  key %q: %d %s keys\n", c.Attribute, c.Keys, c.Distribution)
	if c.Rate > 0 {
		fmt.Fprintf(&b, "load        open model: %s req/s offered, up to %d in flight, %s", formatSig(c.Rate), c.Concurrency, s.extent())
	} else {
		fmt.Fprintf(&b, "load        closed model: %d workers, %s", c.Concurrency, s.extent())
	}
	if c.Warmup > 0 {
		fmt.Fprintf(&b, " after a %v warm-up", c.Warmup)
	}
	b.WriteByte('\n')
	fmt.Fprintf(&b, "requests    %d in %s = %s req/s\n", s.Requests, formatDuration(s.Elapsed), formatSig(s.Throughput))
	fmt.Fprintf(&b, "decisions   allowed %d (%s)  denied %d (%s)  errors %d (%s)\n",
		s.Allowed, percent(s.Allowed, s.Requests), s.Denied, percent(s.Denied, s.Requests),
		s.Errors, percent(s.Errors, s.Requests))
	if s.FailOpen+s.FailClosed > 0 {
		fmt.Fprintf(&b, "by policy   fail-open %d (%s)  fail-closed %d (%s): the service's store did not answer\n",
			s.FailOpen, percent(s.FailOpen, s.Requests), s.FailClosed, percent(s.FailClosed, s.Requests))
	}
	if s.Missed > 0 {
		fmt.Fprintf(&b, "missed      %d requests not sent: every worker was busy (raise concurrency or lower the rate)\n", s.Missed)
	}
	h := s.Latency
	if h == nil {
		h = new(Histogram)
	}
	fmt.Fprintf(&b, "latency     p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s\n",
		formatDuration(h.Quantile(0.5)), formatDuration(h.Quantile(0.9)),
		formatDuration(h.Quantile(0.99)), formatDuration(h.Quantile(0.999)),
		formatDuration(h.Max()), formatDuration(h.Mean()))
	for _, e := range s.ErrorKinds {
		fmt.Fprintf(&b, "error       %d × %s\n", e.Count, e.Message)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// extent says what bounded the run: its duration, or its request count,
// with the duration when that cut the run short.
func (s Summary) extent() string {
	c := s.Config
	switch {
	case c.Requests == 0:
		return c.Duration.String()
	case s.Requests < uint64(c.Requests) && s.Elapsed >= c.Duration:
		return fmt.Sprintf("%d requests, cut short by the %v duration", c.Requests, c.Duration)
	}
	return fmt.Sprintf("%d requests", c.Requests)
}

// formatDuration writes d with three significant digits in the largest unit
// that keeps it ≥ 1: 850ns, 182µs, 1.23ms, 12.5s.
func formatDuration(d time.Duration) string {
	v, unit := float64(d), "ns"
	switch {
	case d >= time.Second:
		v, unit = v/1e9, "s"
	case d >= time.Millisecond:
		v, unit = v/1e6, "ms"
	case d >= time.Microsecond:
		v, unit = v/1e3, "µs"
	default:
		return strconv.FormatInt(int64(d), 10) + unit
	}
	return formatSig(v) + unit
}

// formatSig formats v ≥ 0 with three significant digits, or as a whole number
// when it has more than three digits before the point.
func formatSig(v float64) string {
	prec := 0
	switch {
	case v < 10:
		prec = 2
	case v < 100:
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// percent formats n as a percentage of total.
func percent(n, total uint64) string {
	if total == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(n)/float64(total), 'f', 1, 64) + "%"
}

// MarshalJSON encodes s's results (not its Config) for scripts: counts,
// elapsed seconds, throughput in requests per second and latency percentiles
// in microseconds.
func (s Summary) MarshalJSON() ([]byte, error) {
	h := s.Latency
	if h == nil {
		h = new(Histogram)
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	type latency struct {
		P50  float64 `json:"p50"`
		P90  float64 `json:"p90"`
		P99  float64 `json:"p99"`
		P999 float64 `json:"p99.9"`
		Max  float64 `json:"max"`
		Mean float64 `json:"mean"`
	}
	return json.Marshal(struct {
		Target     Target       `json:"target"`
		Addr       string       `json:"addr"`
		Rate       float64      `json:"rate"`
		Workers    int          `json:"concurrency"`
		Requests   uint64       `json:"requests"`
		Allowed    uint64       `json:"allowed"`
		Denied     uint64       `json:"denied"`
		FailOpen   uint64       `json:"fail_open"`
		FailClosed uint64       `json:"fail_closed"`
		Errors     uint64       `json:"errors"`
		Missed     uint64       `json:"missed"`
		ErrorKinds []ErrorCount `json:"error_kinds,omitempty"`
		Elapsed    float64      `json:"elapsed_s"`
		Throughput float64      `json:"throughput"`
		LatencyUS  latency      `json:"latency_us"`
	}{
		s.Config.Target, s.Config.Addr, s.Config.Rate, s.Config.Concurrency,
		s.Requests, s.Allowed, s.Denied, s.FailOpen, s.FailClosed, s.Errors, s.Missed, s.ErrorKinds,
		s.Elapsed.Seconds(), s.Throughput,
		latency{us(h.Quantile(0.5)), us(h.Quantile(0.9)), us(h.Quantile(0.99)),
			us(h.Quantile(0.999)), us(h.Max()), us(h.Mean())},
	})
}
