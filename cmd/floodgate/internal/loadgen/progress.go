package loadgen

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// progress writes the live progress line of a run from its own goroutine.
type progress struct {
	r     *run
	w     io.Writer
	tty   bool
	stopc chan struct{}
	done  chan struct{}

	scratch   Histogram // latency so far, rebuilt for every line
	before    Histogram // latency as of the last line
	window    Histogram // latency since the last line
	lastRec   *recorder
	lastN     uint64
	lastT     time.Time
	lastWidth int
	// width is the terminal's width in columns (0: unknown or not a
	// terminal); a line is cut to fit, since a wrapped line cannot be
	// rewritten in place.
	width func() int
}

// startProgress starts writing r's progress to r.cfg.Progress every
// r.cfg.ProgressInterval until stop is called.
func startProgress(r *run) *progress {
	p := &progress{
		r:     r,
		w:     r.cfg.Progress,
		tty:   isTerminal(r.cfg.Progress),
		width: func() int { return terminalWidth(r.cfg.Progress) },
		stopc: make(chan struct{}),
		done:  make(chan struct{}),
		lastT: r.start,
	}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(p.r.cfg.ProgressInterval)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			p.line(now, false)
		case <-p.stopc:
			p.line(time.Now(), true)
			if p.tty {
				io.WriteString(p.w, "\n")
			}
			return
		}
	}
}

// stop writes a last line and waits for the progress goroutine to end.
func (p *progress) stop() {
	close(p.stopc)
	<-p.done
}

// line writes one progress line for the time now: the rate and latency
// since the last line (so that a stall shows while it lasts), or the
// phase's on the final line.
func (p *progress) line(now time.Time, final bool) {
	r := p.r
	rec, from, label := r.main, r.measure, ""
	// A tick that lands just after the warm-up ends still reports on the
	// warm-up rather than on a measured part that has barely begun.
	if now.Before(r.measure.Add(r.cfg.ProgressInterval/4)) && r.cfg.Warmup > 0 {
		rec, from, label = r.warm, r.start, "warm-up "
	}
	if rec != p.lastRec {
		p.lastRec, p.lastN, p.lastT = rec, 0, from
		p.before.reset()
	}
	elapsed := max(now.Sub(from), 0)
	label += formatDuration(elapsed.Round(time.Millisecond))
	t := rec.counts()
	n := t.total()
	since, base := p.lastT, p.lastN
	if final {
		since, base = from, 0
		label = "done " + label
	}
	var rate float64
	if dt := now.Sub(since); dt > 0 {
		rate = float64(n-base) / dt.Seconds()
	}
	p.lastN, p.lastT = n, now
	p.scratch.reset()
	rec.latency(&p.scratch)
	lat := &p.scratch
	if !final {
		p.window.difference(&p.scratch, &p.before)
		p.before.reset()
		p.before.Merge(&p.scratch)
		lat = &p.window
	}
	s := fmt.Sprintf("%s  %s req/s  allowed %d  denied %d", label, formatSig(rate), t.allowed, t.denied)
	if t.failOpen+t.failClosed > 0 {
		s += fmt.Sprintf("  fail-open %d  fail-closed %d", t.failOpen, t.failClosed)
	}
	s += fmt.Sprintf("  errors %d  p50 %s  p99 %s", t.errors, formatLatency(lat, 0.5), formatLatency(lat, 0.99))
	if p.tty {
		if w := p.width(); w > 1 && utf8.RuneCountInString(s) > w-1 {
			s = string([]rune(s)[:w-1])
		}
		// Rewrite the line in place, blanking what a longer one left.
		width := utf8.RuneCountInString(s)
		pad := max(p.lastWidth-width, 0)
		p.lastWidth = width
		s = "\r" + s + strings.Repeat(" ", pad)
	} else {
		s += "\n"
	}
	io.WriteString(p.w, s)
}

// formatLatency writes h's q-quantile, or "-" when h is empty (nothing
// answered in the window).
func formatLatency(h *Histogram, q float64) string {
	if h.Count() == 0 {
		return "-"
	}
	return formatDuration(h.Quantile(q))
}

// isTerminal reports whether w is a character device such as a terminal.
// It is a variable so that tests can pretend.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
