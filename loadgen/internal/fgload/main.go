// Command fgload runs the load generator from the command line until
// `floodgate load` is available everywhere; the benchmark scripts use it.
//
//	go run ./loadgen/internal/fgload -target grpc -addr 127.0.0.1:8081 -rate 5000 -duration 10s
//
// The progress line goes to stderr and the summary to stdout, as text or,
// with -json, as one JSON object.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"

	"github.com/floodgate-go/floodgate/loadgen"
)

func main() { os.Exit(run()) }

func run() int {
	var cfg loadgen.Config
	fs := flag.NewFlagSet("fgload", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	quiet := fs.Bool("quiet", false, "no progress line")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the load generator to `file`")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
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
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sum, err := loadgen.Run(ctx, cfg)
	if err != nil && sum.Config.Target == "" {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(sum)
	} else {
		sum.Format(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fgload:", err)
		return 1
	}
	return 0
}
