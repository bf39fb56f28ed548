// Command floodgate runs floodgate's decision service and the tools around
// it: serve, validate, check and load. Run "floodgate --help" for details.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	_ "time/tzdata" // calendar windows in any time zone, on any machine
)

func main() { os.Exit(run()) }

func run() int {
	m := NewMain()
	return m.Run(context.Background(), referenceArgs(os.Args[0], os.Args[1:]))
}

// sampleConfig is the configuration served when no --config is given and
// ./floodgate.yaml does not exist. It is a copy of the repository's
// floodgate.yaml (a test keeps them identical).
//
//go:embed floodgate.yaml
var sampleConfig []byte

// defaultConfigFile is the configuration file serve reads and validate
// checks when none is named; sampleName names sampleConfig in messages.
const (
	defaultConfigFile = "floodgate.yaml"
	sampleName        = "built-in sample floodgate.yaml"
)

// configFile returns the configuration file to read: named, else
// ./floodgate.yaml, else "" when there is none (the built-in sample).
func configFile(named string) string {
	if named != "" {
		return named
	}
	if _, err := os.Stat(defaultConfigFile); errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	return defaultConfigFile // any other error: reading it reports it
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed (or, for check, was denied)
	exitUsage = 2 // bad flags or arguments
)

// Main is the floodgate program: its inputs and outputs are fields so that
// tests can run it in process.
type Main struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment (FLOODGATE_ADMIN_TOKEN,
	// FLOODGATE_TICKET_SECRET).
	Getenv func(string) string
}

// NewMain returns a Main wired to the process's standard streams and
// environment.
func NewMain() *Main {
	return &Main{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

type command struct {
	name    string
	summary string
	run     func(m *Main, ctx context.Context, args []string) int
}

var commands = []command{
	{"serve", "run the decision service (HTTP JSON API, Envoy gRPC API, metrics)", (*Main).serve},
	{"validate", "check configuration files and report every error", (*Main).validate},
	{"check", "ask a running service for one decision", (*Main).check},
	{"load", "generate load against a running service and measure it", (*Main).load},
	{"ratelimit", "act as Envoy's reference rate limit service, configured by its environment variables", (*Main).ratelimit},
	{"version", "print the version, VCS revision and Go version", (*Main).version},
}

const usageHead = `floodgate is a rate-limiting decision service.

Usage:
  floodgate <command> [flags] [arguments]

Commands:
`

const usageTail = `
Run "floodgate <command> --help" for a command's flags. With no flags,
"floodgate serve" starts on 127.0.0.1:8080 (HTTP) and 127.0.0.1:8081
(gRPC), loopback only, with the memory store and ./floodgate.yaml, or a
built-in sample configuration.
`

func (m *Main) usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString(usageTail)
	io.WriteString(w, b.String())
}

// Run runs the command named by args[0] and returns the exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	// The reference service's container: floodgate run bare, or as its
	// image's entrypoint (floodgate serve) with no arguments.
	if (len(args) == 0 || len(args) == 1 && args[0] == "serve") && referenceMode(m.Getenv) {
		return m.ratelimit(ctx, nil)
	}
	if len(args) == 0 {
		m.usage(m.Stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return m.Run(ctx, []string{args[1], "--help"})
		}
		m.usage(m.Stdout)
		return exitOK
	case "-version", "--version":
		return m.version(ctx, args[1:])
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(m, ctx, args[1:])
		}
	}
	fmt.Fprintf(m.Stderr, "floodgate: unknown command %q\n\n", args[0])
	m.usage(m.Stderr)
	return exitUsage
}

// flagSet returns a flag set for a command whose help starts with usage.
func (m *Main) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprint(out, strings.TrimLeft(usage, "\n"))
		fmt.Fprintln(out, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// wantsHelp reports whether args ask for help, so that help goes to stdout.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}

// parseArgs parses args, returning an exit code when the command should
// stop (help, printed to stdout: 0; bad flags: 2).
func (m *Main) parseArgs(fs *flag.FlagSet, args []string) (int, bool) {
	if wantsHelp(args) {
		fs.SetOutput(m.Stdout)
		fs.Usage()
		return exitOK, false
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}
