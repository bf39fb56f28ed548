package main

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// model is a fake upstream model server: it answers a prompt with its words
// in reverse order followed by "ok", cut at max_tokens words, and reports
// the tokens it used (one a word). It can be told to fail, to show failover.
type model struct {
	name    string
	url     string
	failing atomic.Bool
	srv     *http.Server
}

// completionRequest is the body of POST /v1/complete, to the gateway and to
// the models alike. MaxTokens bounds the answer's output tokens.
type completionRequest struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens,omitempty"`
}

// modelResponse is a model's answer.
type modelResponse struct {
	Text  string           `json:"text"`
	Usage map[string]int64 `json:"usage"`
}

// startModel starts a fake model server named name on a free loopback port.
func startModel(name string) (*model, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &model{name: name, url: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/complete", m.complete)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go m.srv.Serve(ln)
	return m, nil
}

// complete serves POST /v1/complete.
func (m *model) complete(w http.ResponseWriter, r *http.Request) {
	if m.failing.Load() {
		http.Error(w, m.name+" is overloaded", http.StatusServiceUnavailable)
		return
	}
	var req completionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	words := strings.Fields(req.Prompt)
	answer := slices.Clone(words)
	slices.Reverse(answer)
	answer = append(answer, "ok")
	if req.MaxTokens > 0 && int64(len(answer)) > req.MaxTokens {
		answer = answer[:req.MaxTokens]
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(modelResponse{
		Text:  strings.Join(answer, " "),
		Usage: map[string]int64{"input": int64(len(words)), "output": int64(len(answer))},
	})
}

// Close stops the server.
func (m *model) Close() error { return m.srv.Close() }
