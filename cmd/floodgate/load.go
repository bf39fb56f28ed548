package main

import (
	"context"
	"fmt"
)

func (m *Main) load(_ context.Context, args []string) int {
	// TODO: wire package loadgen once it lands.
	fmt.Fprintln(m.Stderr, "floodgate load: not yet available in this build")
	return exitUsage
}
