package main

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OpenTelemetry collector's trace endpoint, written for
// the tests: it keeps the spans it is sent over OTLP/HTTP (protobuf, at
// /v1/traces) or OTLP/gRPC, on loopback.
type otlpReceiver struct {
	URL  string // http://host:port, for OTEL_EXPORTER_OTLP_ENDPOINT
	Addr string // host:port

	mu    sync.Mutex
	spans []receivedSpan
}

// receivedSpan is one span with the service.name of its resource.
type receivedSpan struct {
	service    string
	name       string
	traceID    string
	parentID   string
	spanID     string
	attributes map[string]string
}

// startOTLPReceiver serves OTLP over HTTP, or over gRPC with grpc set,
// until t ends.
func startOTLPReceiver(t *testing.T, overGRPC bool) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{Addr: ln.Addr().String(), URL: "http://" + ln.Addr().String()}
	if overGRPC {
		gs := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(gs, traceService{r: r})
		go gs.Serve(ln)
		t.Cleanup(gs.Stop)
		return r
	}
	hs := &http.Server{Handler: http.HandlerFunc(r.serveHTTP)}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return r
}

func (r *otlpReceiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want protobuf at /v1/traces", http.StatusNotFound)
		return
	}
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(data, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *otlpReceiver
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, received(service, sp))
			}
		}
	}
}

func received(service string, sp *tracepb.Span) receivedSpan {
	attrs := map[string]string{}
	for _, kv := range sp.GetAttributes() {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			attrs[kv.GetKey()] = v.GetStringValue()
		default:
			attrs[kv.GetKey()] = v.String()
		}
	}
	return receivedSpan{service: service, name: sp.GetName(), traceID: hex.EncodeToString(sp.GetTraceId()),
		spanID: hex.EncodeToString(sp.GetSpanId()), parentID: hex.EncodeToString(sp.GetParentSpanId()), attributes: attrs}
}

// received returns the spans received so far.
func (r *otlpReceiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

// find returns the spans received so far for which keep is true.
func (r *otlpReceiver) find(keep func(receivedSpan) bool) []receivedSpan {
	var out []receivedSpan
	for _, s := range r.received() {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}
