package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// The endpoints of Envoy's reference rate limit service, so that the
// probes and scripts written for it keep working: GET /healthcheck and
// POST /json on the HTTP listener, and DebugHandler's /rlconfig.

// handleHealthcheck serves GET /healthcheck as the reference service does:
// 200 "OK" while serving, 500 with an empty body while shutting down or,
// with EnvoySettings.RequireDomains, while no Envoy domain is loaded.
func (s *Server) handleHealthcheck(w http.ResponseWriter, r *http.Request) *httpError {
	healthy := true
	select {
	case <-s.done:
		healthy = false
	default:
	}
	if s.Envoy.RequireDomains && (s.envoy == nil || len(s.envoy.Config().Domains()) == 0) {
		healthy = false
	}
	if s.xds != nil && !s.xds.ready() {
		healthy = false // waiting for the first xDS push
	}
	if !healthy {
		w.WriteHeader(http.StatusInternalServerError)
		return nil
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "OK")
	return nil
}

// handleJSON serves POST /json: Envoy's RateLimitRequest in its JSON form
// (protojson) in, the RateLimitResponse in the same form out, with status
// 200 when the overall code is OK, 429 when it is OVER_LIMIT. A body that
// is not a request, and a request the service refuses (an empty domain or
// descriptor list), answer 400.
func (s *Server) handleJSON(w http.ResponseWriter, r *http.Request) *httpError {
	if s.envoy == nil {
		return &httpError{status: http.StatusNotFound, kind: kindNotFound, detail: "no Envoy domains are served (--envoy-config-dir)"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.MaxBodyBytes))
	if err != nil {
		return &httpError{status: http.StatusRequestEntityTooLarge, kind: kindBodyTooLarge,
			detail: fmt.Sprintf("the body is larger than %d bytes", s.MaxBodyBytes)}
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		return badRequest("the body is not an Envoy RateLimitRequest in JSON: " + err.Error())
	}
	resp, err := s.shouldRateLimit(r.Context(), &req)
	if err != nil {
		return badRequest(status.Convert(err).Message())
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		return &httpError{status: http.StatusInternalServerError, kind: "internal", detail: "encoding the response failed"}
	}
	w.Header().Set("Content-Type", "application/json")
	switch resp.OverallCode {
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		w.WriteHeader(http.StatusTooManyRequests)
	case rlsv3.RateLimitResponse_OK:
	default:
		w.WriteHeader(http.StatusInternalServerError)
	}
	w.Write(out)
	return nil
}

// DebugHandler returns the endpoints of the reference service's debug
// port: /rlconfig (the Envoy limits in force, one per line; see
// envoy.Config.Dump), the Go profiler under /debug/pprof/, and / listing
// them. It is valid after Open; serve it on a private address.
func (s *Server) DebugHandler() http.Handler {
	endpoints := map[string]string{
		"/rlconfig":            "print out the currently loaded configuration for debugging",
		"/debug/pprof/":        "root of various pprof endpoints. hit for help.",
		"/debug/pprof/profile": "CPU profiling endpoint",
		"/debug/pprof/trace":   "trace endpoint",
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.envoy != nil {
			io.WriteString(w, s.envoy.Config().Dump())
		}
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		paths := make([]string, 0, len(endpoints))
		for p := range endpoints {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		var b strings.Builder
		for _, p := range paths {
			fmt.Fprintf(&b, "%s: %s\n", p, endpoints[p])
		}
		io.WriteString(w, b.String())
	})
	return mux
}
