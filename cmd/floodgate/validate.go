package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/envoy"
)

const validateUsage = `
Usage: floodgate validate [--envoy-config-dir DIR] [FILE...]

Checks floodgate configuration files (and, with --envoy-config-dir, a
directory of Envoy rate limit service files) without starting anything.
With neither, it checks what "floodgate serve" would start with:
./floodgate.yaml, or the built-in sample when there is no such file.
Every error is printed as file:line:column: field: message; the exit status
is 1 when a file has errors, 0 when all are valid.
`

func (m *Main) validate(_ context.Context, args []string) int {
	fs := m.flagSet("validate", validateUsage)
	quiet := fs.Bool("q", false, "print errors only, nothing for valid files")
	envoyDir := fs.String("envoy-config-dir", "", "also check this `directory` of Envoy rate limit configuration files")
	if code, ok := m.parseArgs(fs, args); !ok {
		return code
	}
	files := fs.Args()
	if len(files) == 0 && *envoyDir == "" {
		path := configFile("")
		if path == "" {
			c, err := config.Parse(sampleName, sampleConfig)
			if err != nil {
				fmt.Fprintln(m.Stderr, err)
				return exitFail
			}
			if !*quiet {
				fmt.Fprintf(m.Stdout, "%s: ok (%d limiters, %s store); there is no ./%s, so floodgate serve starts with it\n",
					sampleName, len(c.Limiters), storeName(c), defaultConfigFile)
			}
			return exitOK
		}
		files = []string{path}
	}
	code := exitOK
	for _, path := range files {
		c, err := config.LoadWith(path, config.Options{EnvoyDomains: *envoyDir != ""})
		if err != nil {
			code = exitFail
			var list config.ErrorList
			if errors.As(err, &list) {
				for _, e := range list {
					fmt.Fprintln(m.Stderr, e)
				}
			} else {
				fmt.Fprintf(m.Stderr, "%v\n", err)
			}
			continue
		}
		if !*quiet {
			fmt.Fprintf(m.Stdout, "%s: ok (%d limiters, %s store)\n", path, len(c.Limiters), storeName(c))
		}
	}
	if *envoyDir != "" {
		c, err := envoy.LoadDir(*envoyDir)
		if err != nil {
			code = exitFail
			fmt.Fprintln(m.Stderr, strings.TrimPrefix(err.Error(), "envoy: "))
		} else if !*quiet {
			fmt.Fprintf(m.Stdout, "%s: ok (%d domains)\n", *envoyDir, len(c.Domains()))
		}
	}
	return code
}
