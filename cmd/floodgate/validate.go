package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate/config"
)

const validateUsage = `
Usage: floodgate validate FILE...

Checks floodgate configuration files without starting anything. Every error
is printed as file:line:column: field: message; the exit status is 1 when a
file has errors, 0 when all are valid.
`

func (m *Main) validate(_ context.Context, args []string) int {
	fs := m.flagSet("validate", validateUsage)
	quiet := fs.Bool("q", false, "print errors only, nothing for valid files")
	if code, ok := m.parseArgs(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(m.Stderr, "floodgate validate: name at least one configuration file")
		fs.Usage()
		return exitUsage
	}
	code := exitOK
	for _, path := range fs.Args() {
		c, err := config.Load(path)
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
	return code
}
