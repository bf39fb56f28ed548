package server

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// Readiness means "this instance answers decisions as configured": with
// the store, or, while the store cannot answer, with the fallback or the
// failure policy, which are part of the configuration. A store that is
// down is the same store for every instance: taking them all out of
// their Service would not route around it, only turn the configured
// answers (the fallback's limits, fail open, fail closed) into connection
// errors. So the store's state is reported, in the body and in
// floodgate_store_reachable, and does not make the instance unready; only
// shutting down does.

// readyzPingTimeout bounds the store ping of /readyz and of a metrics
// scrape, well under the 1s timeout of a Kubernetes probe, so that a hung
// store is reported as unreachable rather than the probe time out.
const readyzPingTimeout = 250 * time.Millisecond

// Values of /readyz's store.decisions: who decides while the store is in
// that state.
const (
	decidedByStore    = "store"
	decidedByFallback = "fallback"
	decidedByPolicy   = "failure_policy"
)

// Pinger is implemented by stores that can tell whether they are reachable
// (a Redis store). /readyz and floodgate_store_reachable call it, on the
// store or the store it decorates (found through an Unwrap() store.Store
// method, as store/overlimit has); stores without one are always
// reachable.
type Pinger interface {
	Ping(ctx context.Context) error
}

// pinger returns the Pinger of st or of the stores st decorates.
func pinger(st store.Store) (Pinger, bool) {
	for st != nil {
		if p, ok := st.(Pinger); ok {
			return p, true
		}
		u, ok := st.(interface{ Unwrap() store.Store })
		if !ok {
			break
		}
		st = u.Unwrap()
	}
	return nil, false
}

// pingStore reports whether the store answers within readyzPingTimeout.
func (s *Server) pingStore(ctx context.Context) error {
	p, ok := pinger(s.Store)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyzPingTimeout)
	defer cancel()
	return p.Ping(ctx)
}

type readiness struct {
	Status string       `json:"status"`
	Config configStatus `json:"config"`
	Store  storeStatus  `json:"store"`
}

type configStatus struct {
	File     string    `json:"file,omitempty"`
	LoadedAt time.Time `json:"loaded_at"`
	Limiters int       `json:"limiters"`
	// EnvoyDomains counts the Envoy domains served, when an Envoy
	// directory is.
	EnvoyDomains *int `json:"envoy_domains,omitempty"`
	// LastReloadError is why the last reload was rejected; the
	// configuration loaded at LoadedAt keeps serving meanwhile.
	LastReloadError    string     `json:"last_reload_error,omitempty"`
	LastReloadFailedAt *time.Time `json:"last_reload_failed_at,omitempty"`
	// XDS is the state of the xDS client that configures the Envoy
	// domains, when one does.
	XDS *xdsState `json:"xds,omitempty"`
}

type storeStatus struct {
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Decisions says who decides now: the store, the fallback, or each
	// limiter's failure policy.
	Decisions string `json:"decisions"`
	// FailClosed names the limiters that deny every request while the
	// failure policy decides.
	FailClosed []string `json:"fail_closed,omitempty"`
}

// handleReadyz serves GET /readyz: 200 while the service answers decisions
// as configured, 503 while it shuts down. The body says how it answers:
// with the store ("status":"ready"), or, while the store is unreachable,
// with the fallback or the failure policies ("status":"degraded", the
// ping's error, and the limiters that fail closed). A rejected reload does
// not make the service unready (the previous configuration serves), but
// it is reported.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) *httpError {
	out := readiness{Status: "ready", Config: s.configStatus()}
	out.Store = storeStatus{Reachable: true, Decisions: decidedByStore}
	if err := s.pingStore(r.Context()); err != nil {
		out.Status = "degraded"
		out.Store = storeStatus{Error: err.Error(), Decisions: decidedByFallback}
		if s.Fallback == nil {
			out.Store.Decisions = decidedByPolicy
			out.Store.FailClosed = s.failClosed()
		}
	}
	status := http.StatusOK
	if s.xds != nil && !s.xds.ready() {
		out.Status = "waiting for the first xDS configuration"
		status = http.StatusServiceUnavailable
	}
	select {
	case <-s.done:
		out.Status = "shutting down"
		status = http.StatusServiceUnavailable
	default:
	}
	writeJSON(w, status, out)
	return nil
}

// configStatus describes the configuration in use, for /readyz and the
// status page.
func (s *Server) configStatus() configStatus {
	set, st := s.limiters.Load(), s.state.Load()
	out := configStatus{File: set.config.File, LoadedAt: st.loadedAt.UTC(), Limiters: len(set.names)}
	if s.envoy != nil {
		n := len(s.envoy.Config().Domains())
		out.EnvoyDomains = &n
	}
	if s.xds != nil {
		out.XDS = s.xds.snapshot()
	}
	if st.err != nil {
		out.LastReloadError = st.err.Error()
		at := st.failedAt.UTC()
		out.LastReloadFailedAt = &at
	}
	return out
}

// failClosed names, sorted, the limiters whose failure policy is closed:
// the configuration's and the Envoy domains'.
func (s *Server) failClosed() []string {
	var names []string
	for _, l := range s.observed() {
		if l.FailurePolicy() == floodgate.FailClosed {
			names = append(names, l.Name())
		}
	}
	sort.Strings(names)
	return names
}
