package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// Values of floodgate_decisions_total's result label.
const (
	resultAllowed      = "allowed"
	resultDenied       = "denied"
	resultShadowDenied = "shadow_denied"
	resultFailOpen     = "fail_open"
	resultFailClosed   = "fail_closed"
)

// metrics are the service's Prometheus metrics. No label ever holds a key,
// an address or a user id: limiter and rule names come from the
// configuration, the others from fixed sets.
type metrics struct {
	decisions     *prometheus.CounterVec
	skipped       *prometheus.CounterVec
	records       *prometheus.CounterVec
	refunds       *prometheus.CounterVec
	settlements   *prometheus.CounterVec
	holds         *holds // floodgate_held_units, floodgate_holds_lapsed_total
	selects       *prometheus.CounterVec
	storeDuration *prometheus.HistogramVec
	reloads       *prometheus.CounterVec
	lastReload    prometheus.Gauge
	lastReloadOK  prometheus.Gauge
	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	grpcRequests  *prometheus.CounterVec
	grpcDuration  *prometheus.HistogramVec
	grpcMethods   sync.Map // full method name → *grpcMethodMetrics

	storeOK [6]prometheus.Observer // by floodgate.Mode, error "none"

	// ruleName is the rule label of a limiter's rule (Server.ruleName).
	ruleName func(limiter, rule string) string
}

func newMetrics(reg prometheus.Registerer, s *Server) (*metrics, error) {
	m := &metrics{
		ruleName: s.ruleName,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Decisions (checks and peeks) by limiter, binding rule and result: allowed, denied, shadow_denied, fail_open or fail_closed.",
		}, []string{"limiter", "rule", "result"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rules_skipped_total",
			Help: "Decisions of a configured limiter that skipped a keyed rule because the request had no key for it (an attribute missing or empty), by limiter and rule.",
		}, []string{"limiter", "rule"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_records_total",
			Help: "Usage recorded after the fact (POST /v1/record), by limiter.",
		}, []string{"limiter"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_refunds_total",
			Help: "Ticket refunds by limiter and result: applied, replayed (a ticket this instance refunded already; the store gives nothing back twice), failed (store error) or rejected (forged or malformed ticket; limiter is empty).",
		}, []string{"limiter", "result"}),
		settlements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_settlements_total",
			Help: "Reservations settled or released through this instance (POST /v1/settle, Envoy's stream-done charges on reservable limits), by limiter and result: settled (the holds were there), lapsed (a hold had lapsed already; the usage was charged all the same), already_settled (nothing changed), failed (store error; the holds lapse by themselves) or rejected (forged or malformed ticket, or not a reservation's; limiter is empty).",
		}, []string{"limiter", "result"}),
		holds: newHolds(s.Clock, s.ruleName, s.Logger),
		selects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_select_total",
			Help: "Selections (POST /v1/select) by configured route (empty for inline candidates) and result: admitted, capped, never (every capped candidate refused a cost it can never admit) or exhausted (every candidate excluded).",
		}, []string{"route", "result"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_store_duration_seconds",
			Help:    "Latency of store calls by operation (consume, peek, record, refund, reset, settle) and error (none, timeout, canceled, other).",
			Buckets: []float64{.00001, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"operation", "error"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_config_reloads_total",
			Help: "Configuration reloads by result: success or failure.",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration in use was loaded, in seconds since the Unix epoch.",
		}),
		lastReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_last_reload_successful",
			Help: "1 when the last configuration load succeeded, 0 when the previous configuration is serving because it failed.",
		}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_requests_total",
			Help: "HTTP requests by endpoint and status code.",
		}, []string{"handler", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_http_request_duration_seconds",
			Help:    "HTTP request latency by endpoint.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"handler"}),
		grpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_grpc_requests_total",
			Help: "gRPC calls by full method name and status code.",
		}, []string{"method", "code"}),
		grpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_grpc_request_duration_seconds",
			Help:    "gRPC call latency (unary: until the response is sent; streams: the stream's life) by full method name.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{
		m.decisions, m.skipped, m.records, m.refunds, m.settlements, m.holds, m.selects, m.storeDuration, m.reloads, m.lastReload,
		m.lastReloadOK, m.httpRequests, m.httpDuration, m.grpcRequests, m.grpcDuration, breakerCollector{s}, storeCollector{s},
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for mode := range m.storeOK {
		m.storeOK[mode] = m.storeDuration.WithLabelValues(floodgate.Mode(mode).String(), "none")
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	return m, nil
}

// grpcMethodMetrics are one gRPC method's series, resolved once: a call then
// costs a map load and two atomic updates instead of label look-ups.
type grpcMethodMetrics struct {
	duration prometheus.Observer
	byCode   [codes.Unauthenticated + 1]prometheus.Counter
}

// grpcMethod returns the series of a full method name. gRPC invokes the
// interceptors only for registered methods, so the label's values are a
// fixed set. Every code's series is created with the method, at zero, so a
// rate over a code that has not happened yet is 0 rather than absent.
func (m *metrics) grpcMethod(method string) *grpcMethodMetrics {
	if mm, ok := m.grpcMethods.Load(method); ok {
		return mm.(*grpcMethodMetrics)
	}
	mm := &grpcMethodMetrics{duration: m.grpcDuration.WithLabelValues(method)}
	for c := range mm.byCode {
		mm.byCode[c] = m.grpcRequests.WithLabelValues(method, codes.Code(c).String())
	}
	actual, _ := m.grpcMethods.LoadOrStore(method, mm)
	return actual.(*grpcMethodMetrics)
}

// done counts a finished call and its latency.
func (mm *grpcMethodMetrics) done(start time.Time, err error) {
	mm.duration.Observe(time.Since(start).Seconds())
	c := status.Code(err)
	if int(c) >= len(mm.byCode) {
		c = codes.Unknown
	}
	mm.byCode[c].Inc()
}

// unaryInterceptor counts and times every unary gRPC call.
func (m *metrics) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	mm := m.grpcMethod(info.FullMethod)
	start := time.Now()
	resp, err := handler(ctx, req)
	mm.done(start, err)
	return resp, err
}

// streamInterceptor counts and times every streaming gRPC call.
func (m *metrics) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	mm := m.grpcMethod(info.FullMethod)
	start := time.Now()
	err := handler(srv, ss)
	mm.done(start, err)
	return err
}

// observe is every limiter's floodgate.Observer: one count per decision.
func (m *metrics) observe(_ context.Context, e floodgate.Event) {
	switch e.Mode {
	case floodgate.ModeRecord:
		m.records.WithLabelValues(e.Limiter).Inc()
		return
	case floodgate.ModeConsume, floodgate.ModePeek:
	default:
		return
	}
	m.decisions.WithLabelValues(e.Limiter, m.ruleName(e.Limiter, bindingRule(&e)), result(&e.Decision)).Inc()
}

// result classifies a decision for floodgate_decisions_total.
func result(d *floodgate.Decision) string {
	switch {
	case d.Reason == floodgate.ReasonStore && d.Allowed:
		return resultFailOpen
	case d.Reason == floodgate.ReasonStore:
		return resultFailClosed
	case !d.Allowed:
		return resultDenied
	case d.ShadowDenied:
		return resultShadowDenied
	}
	return resultAllowed
}

// bindingRule names the rule a decision is counted under: the binding rule,
// or for a shadow denial the first shadow rule that would have denied.
func bindingRule(e *floodgate.Event) string {
	if d := &e.Decision; d.Allowed && d.ShadowDenied && d.Reason == floodgate.ReasonNone {
		for _, r := range e.Rules() {
			if r.Denied && r.Shadow {
				return r.Rule
			}
		}
	}
	return e.Decision.Rule
}

func (m *metrics) reloadOK(at time.Time) {
	m.reloads.WithLabelValues("success").Inc()
	m.lastReload.Set(float64(at.UnixNano()) / 1e9)
	m.lastReloadOK.Set(1)
}

func (m *metrics) reloadFailed() {
	m.reloads.WithLabelValues("failure").Inc()
	m.lastReloadOK.Set(0)
}

// instrument wraps a store so that every call's latency is observed.
func (m *metrics) instrument(s store.Store) store.Store {
	return &instrumentedStore{Store: s, m: m}
}

// instrumentedStore is a store.Store decorator that times every call.
type instrumentedStore struct {
	store.Store
	m *metrics
}

// Apply applies b on the wrapped store and observes its latency.
func (s *instrumentedStore) Apply(ctx context.Context, b *store.Batch) error {
	start := time.Now()
	err := s.Store.Apply(ctx, b)
	took := time.Since(start).Seconds()
	if err == nil && int(b.Mode) < len(s.m.storeOK) {
		s.m.storeOK[b.Mode].Observe(took)
		return err
	}
	s.m.storeDuration.WithLabelValues(b.Mode.String(), errorType(err)).Observe(took)
	return err
}

func errorType(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other"
}

// breakerCollector reports the breaker state of each current limiter, the
// configuration's and the Envoy domains', read at scrape time so that it
// follows reloads.
type breakerCollector struct{ s *Server }

var breakerDesc = prometheus.NewDesc("floodgate_breaker_state",
	"State of each limiter's store circuit breaker: 0 closed, 1 open, 2 half open.",
	[]string{"limiter"}, nil)

// Describe implements prometheus.Collector.
func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- breakerDesc }

// Collect implements prometheus.Collector.
func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.limiters.Load() == nil {
		return
	}
	for _, l := range c.s.observed() {
		ch <- prometheus.MustNewConstMetric(breakerDesc, prometheus.GaugeValue, float64(l.Breaker()), l.Name())
	}
}

// storeCollector reports floodgate_store_reachable, pinging the store at
// scrape time.
type storeCollector struct{ s *Server }

var storeReachableDesc = prometheus.NewDesc("floodgate_store_reachable",
	"1 when the store answers a ping (within 250ms), 0 when it does not and the fallback or the failure policy decides.",
	nil, nil)

// Describe implements prometheus.Collector.
func (c storeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- storeReachableDesc }

// Collect implements prometheus.Collector.
func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	v := 1.0
	if c.s.pingStore(context.Background()) != nil {
		v = 0
	}
	ch <- prometheus.MustNewConstMetric(storeReachableDesc, prometheus.GaugeValue, v)
}
