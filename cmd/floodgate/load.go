package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/floodgate-go/floodgate/cmd/floodgate/internal/loadgen"
)

const loadUsage = `
Usage: floodgate load [flags]

Drives a running service with load and measures it: the HTTP JSON API
(POST /v1/check, the default) or Envoy's gRPC API (--target grpc). Either a
fixed rate (--rate, an open model: latency counts from each request's
intended send time) or a fixed number of workers sending back to back
(--concurrency, the default with 16 workers). Keys are drawn from --keys
distinct values, uniformly or Zipf-distributed.

A progress line is printed to stderr every second, with the rate and
latency of that second; the summary (throughput, allowed and denied counts,
decisions of the failure policy, errors, latency percentiles) goes to stdout
when the run ends or on Ctrl-C. Exit status: 0, or 1 when requests failed
(got no decision), whether the run ran its course or was interrupted.

Examples:
  floodgate load --limiter api --attribute user --keys 10000 --duration 30s
  floodgate load --target grpc --addr 127.0.0.1:8081 --domain edge \
      --attribute remote_address --rate 20000
`

func (m *Main) load(ctx context.Context, args []string) int {
	var cfg loadgen.Config
	fs := m.flagSet("load", loadUsage)
	cfg.RegisterFlags(fs)
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	quiet := fs.Bool("quiet", false, "print no progress line")
	if code, ok := m.parseArgs(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(m.Stderr, "floodgate load: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if cfg.Addr == "" {
		cfg.Addr = "http://127.0.0.1:8080"
		if cfg.Target == loadgen.GRPC {
			cfg.Addr = "127.0.0.1:8081"
		}
	}
	if cfg.Rate == 0 && cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(m.Stderr, "floodgate load: %v\n", err)
		return exitUsage
	}
	if !*quiet {
		cfg.Progress = m.Stderr
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := loadgen.Run(ctx, cfg)
	if err != nil && sum.Config.Target == "" {
		fmt.Fprintf(m.Stderr, "floodgate load: %v\n", err)
		return exitUsage
	}
	if *asJSON {
		json.NewEncoder(m.Stdout).Encode(sum)
	} else {
		sum.Format(m.Stdout)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(m.Stderr, "floodgate load: %v\n", err)
		return exitFail
	}
	if ctx.Err() != nil {
		fmt.Fprintln(m.Stderr, "floodgate load: interrupted; the summary covers the run until then")
	}
	if sum.Errors > 0 {
		return exitFail
	}
	return exitOK
}
