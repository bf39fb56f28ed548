package server

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate/envoy"
)

// DefaultEnvoyRemoveAfter is how long a domain whose Envoy file has gone
// keeps being served with its last limits when EnvoyRemoveAfter is 0.
const DefaultEnvoyRemoveAfter = 30 * time.Second

// envoyKeep keeps serving, for a while, the Envoy domains whose files a
// reload no longer finds. A file deleted, or moved away and back, by a
// deployment would otherwise lift every limit of its domain at once, and a
// domain without limits admits everything. Its fields are guarded by
// Server.reloadMu.
type envoyKeep struct {
	goneSince map[string]time.Time // domain → when a reload first missed its file
	timer     *time.Timer          // the reload that removes the next domain due

	missing *prometheus.GaugeVec
	removed prometheus.Counter
}

func newEnvoyKeep(reg prometheus.Registerer) (*envoyKeep, error) {
	k := &envoyKeep{
		goneSince: map[string]time.Time{},
		missing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_envoy_domain_file_missing",
			Help: "1 for each Envoy domain whose file is gone and which is still served with its last limits, until EnvoyRemoveAfter (the serve command's default: 30s) has passed.",
		}, []string{"domain"}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_envoy_domains_removed_total",
			Help: "Envoy domains removed because their file had been gone for EnvoyRemoveAfter.",
		}),
	}
	for _, c := range []prometheus.Collector{k.missing, k.removed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// keepMissing returns cfg, just loaded from EnvoyConfigDir, with the
// domains now served whose file cfg lacks and has lacked for less than
// EnvoyRemoveAfter, each logged at WARN on every reload that keeps it. A
// domain gone for longer is left out (and so removed), logged at WARN and
// counted. When it keeps any, it schedules a Reload for when the first of
// them is due, so that a domain goes on time without a file event or a
// SIGHUP. It requires s.reloadMu.
func (s *Server) keepMissing(cfg *envoy.Config, now time.Time) *envoy.Config {
	k := s.envoyKeep
	serving := s.envoy.Config()
	present := map[string]bool{}
	for _, d := range cfg.Domains() {
		present[d] = true
	}
	for d := range k.goneSince {
		if present[d] {
			delete(k.goneSince, d) // the file is back
			k.missing.DeleteLabelValues(d)
			s.Logger.Info("envoy domain file is back", "domain", d, "file", cfg.File(d))
		}
	}
	after := s.envoyRemoveAfter()
	var kept []string
	var next time.Duration
	for _, d := range serving.Domains() {
		if present[d] {
			continue
		}
		since, ok := k.goneSince[d]
		if !ok {
			since = now
			k.goneSince[d] = now
		}
		gone := now.Sub(since)
		if gone >= after {
			delete(k.goneSince, d)
			k.missing.DeleteLabelValues(d)
			k.removed.Inc()
			s.Logger.Warn("envoy domain removed: its file has been gone for the stated time",
				"domain", d, "file", serving.File(d), "gone_for", gone.Round(time.Millisecond), "remove_after", after)
			continue
		}
		kept = append(kept, d)
		k.missing.WithLabelValues(d).Set(1)
		s.Logger.Warn("envoy domain file is gone; its last limits keep serving until it has been gone for remove_after",
			"domain", d, "file", serving.File(d), "gone_for", gone.Round(time.Millisecond), "remove_after", after)
		if left := after - gone; next == 0 || left < next {
			next = left
		}
	}
	sort.Strings(kept)
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	if len(kept) > 0 {
		k.timer = time.AfterFunc(next, s.reloadForRemoval)
	}
	return cfg.Keep(serving, kept...)
}

// reloadForRemoval is the Reload keepMissing schedules; it does nothing
// once the server is closing.
func (s *Server) reloadForRemoval() {
	select {
	case <-s.done:
		return
	default:
	}
	s.Reload()
}

// envoyRemoveAfter is EnvoyRemoveAfter with its default applied: 0 (a
// negative setting) removes a domain on the first reload that misses it.
func (s *Server) envoyRemoveAfter() time.Duration {
	switch {
	case s.EnvoyRemoveAfter < 0:
		return 0
	case s.EnvoyRemoveAfter == 0:
		return DefaultEnvoyRemoveAfter
	}
	return s.EnvoyRemoveAfter
}

// stopEnvoyKeep stops the scheduled removal; Close calls it.
func (s *Server) stopEnvoyKeep() {
	if s.envoyKeep == nil {
		return
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.envoyKeep.timer != nil {
		s.envoyKeep.timer.Stop()
	}
}
