//go:build !unix

package loadgen

import "io"

// terminalWidth returns 0: the width is unknown, and lines are not cut.
var terminalWidth = func(io.Writer) int { return 0 }
