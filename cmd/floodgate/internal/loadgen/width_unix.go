//go:build unix

package loadgen

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth returns the width in columns of the terminal w writes to,
// or 0 when w is not a terminal. It is a variable so that tests can pretend.
var terminalWidth = func(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
