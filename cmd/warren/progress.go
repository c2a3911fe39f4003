package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

const (
	// progressEvery is how often the line is redrawn, at most.
	progressEvery = 100 * time.Millisecond
	// progressDelay and progressBytes keep short work quiet: the line shows
	// once the work has taken progressDelay, or moved progressBytes.
	progressDelay = time.Second
	progressBytes = 1 << 20
	// progressWidth is the width of a line when the terminal's is unknown.
	progressWidth = 80
	progressBar   = 20 // the bar's cells
)

// progress is a line on stderr that shows long work as it goes: a label,
// how much is done of how much (bytes or things) with a percentage and a
// bar when the total is known, else a spinner, a rate, the time elapsed
// and a status. It is redrawn in place ("\r") at most every progressEvery,
// and ends either as a final line or cleared.
//
// Its methods may be called from several goroutines. A nil *progress does
// nothing: commands call it alike whether progress is shown or not.
type progress struct {
	w     io.Writer
	now   func() time.Time
	width int // the terminal's columns: a longer line is cut
	label string
	bytes bool // done and total count bytes, else things
	start time.Time

	// tick, when started, is closed to stop the ticker; ticked is closed
	// when it has stopped.
	tick, ticked chan struct{}

	mu          sync.Mutex // guards the fields below and the writes to w
	done, total int64      // total < 0: unknown
	status      string
	drawn       time.Time // when the line was last drawn; zero: never
	shown       int       // the runes of the line on the screen
	frame       int       // the spinner's
	ended       bool
}

// newProgress returns a progress line on w that starts now; total < 0 is
// unknown.
func newProgress(w io.Writer, now func() time.Time, width int, label string, total int64, bytes bool) *progress {
	return &progress{w: w, now: now, width: width, label: label, bytes: bytes, start: now(), total: total}
}

// progress returns the progress line of work named label on c's stderr,
// started, or nil when none is to be shown: off (--no-progress), or stderr
// is not a terminal.
func (c *cli) progress(off bool, label string, total int64, bytes bool) *progress {
	if off {
		return nil
	}
	width := progressWidth
	if !c.forceProgress {
		f, ok := c.stderr.(*os.File)
		if !ok || !isTerminal(f) {
			return nil
		}
		if cols, _, ok := terminalSize(f); ok {
			width = int(cols)
		}
	}
	p := newProgress(c.stderr, time.Now, width, label, total, bytes)
	p.startTicker()
	return p
}

// noProgressUsage is the usage of every command's --no-progress.
const noProgressUsage = "show no progress line on stderr (one is shown only when stderr is a terminal)"

// startTicker redraws the line every progressEvery, so that the elapsed
// time and the spinner move while nothing else does, until end.
func (p *progress) startTicker() {
	p.tick, p.ticked = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.ticked)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.tick:
				return
			case <-t.C:
				p.mu.Lock()
				p.draw(false)
				p.mu.Unlock()
			}
		}
	}()
}

// add counts n more done.
func (p *progress) add(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	p.draw(false)
}

// setTotal sets the total; < 0 is unknown.
func (p *progress) setTotal(total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = total
	p.draw(false)
}

// setDone sets how much is done, and the total to it: the work is over.
func (p *progress) setDone(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total = n, n
}

// setStatus sets the words shown at the end of the line.
func (p *progress) setStatus(s string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = s
	p.draw(false)
}

// end stops the line; its owner calls it once. With keep, when the line
// is worth showing, it is drawn a last time with status final (if not "")
// and left on the screen; otherwise it is cleared, for an error message to
// take its place.
func (p *progress) end(keep bool, final string) {
	if p == nil {
		return
	}
	if p.tick != nil {
		close(p.tick)
		<-p.ticked
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	if keep && p.visible(p.now()) {
		if final != "" {
			p.status = final
		}
		p.draw(true)
		fmt.Fprint(p.w, "\n")
	} else if p.shown > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.shown))
	}
	p.ended = true
}

// visible says whether the work is long or big enough to show at now.
func (p *progress) visible(now time.Time) bool {
	return !p.drawn.IsZero() || now.Sub(p.start) >= progressDelay ||
		p.bytes && max(p.done, p.total) >= progressBytes
}

// draw redraws the line, unless it was drawn less than progressEvery ago
// or is not yet worth showing; force draws it anyway. p.mu is held.
func (p *progress) draw(force bool) {
	now := p.now()
	if p.ended || !force && (!p.visible(now) || now.Sub(p.drawn) < progressEvery) {
		return
	}
	line := p.line(now)
	n := utf8.RuneCountInString(line)
	pad := ""
	if n < p.shown {
		pad = strings.Repeat(" ", p.shown-n)
	}
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
	p.shown, p.drawn = n, now
	p.frame++
}

// line is the text of the line at now, cut to the terminal's width (one
// column spare, for the cursor: a full line would wrap).
func (p *progress) line(now time.Time) string {
	elapsed := now.Sub(p.start)
	parts := []string{p.label}
	switch {
	case p.total >= 0:
		pct := 100.0
		if p.total > 0 {
			pct = min(100, 100*float64(p.done)/float64(p.total))
		}
		fill := int(pct / 100 * progressBar)
		parts = append(parts, p.amount(p.done)+" / "+p.amount(p.total),
			fmt.Sprintf("%3.0f%% [%s%s]", pct, strings.Repeat("#", fill), strings.Repeat(".", progressBar-fill)))
	case p.bytes:
		parts = append(parts, `|/-\`[p.frame%4:p.frame%4+1], p.amount(p.done))
	default:
		parts = append(parts, `|/-\`[p.frame%4:p.frame%4+1])
	}
	if p.done > 0 && elapsed > 0 {
		rate := float64(p.done) / elapsed.Seconds()
		if p.bytes {
			parts = append(parts, humanBytes(int64(rate))+"/s")
		} else {
			parts = append(parts, fmt.Sprintf("%.1f/s", rate))
		}
	}
	parts = append(parts, humanDuration(elapsed))
	if p.status != "" {
		parts = append(parts, p.status)
	}
	line := strings.Join(parts, "  ")
	if limit := p.width - 1; utf8.RuneCountInString(line) > limit {
		line = string([]rune(line)[:limit])
	}
	return line
}

// amount formats n as p counts.
func (p *progress) amount(n int64) string {
	if p.bytes {
		return humanBytes(n)
	}
	return fmt.Sprint(n)
}

// humanBytes formats n bytes in B, KiB, MiB, GiB or TiB.
func humanBytes(n int64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/(1<<10), 0
	for v >= 1<<10 && unit < 3 {
		v /= 1 << 10
		unit++
	}
	return fmt.Sprintf("%.1f %s", v, [...]string{"KiB", "MiB", "GiB", "TiB"}[unit])
}

// humanDuration formats d as tenths of a second under 10 s, else to the
// second.
func humanDuration(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// progressReader counts on p what is read through it.
type progressReader struct {
	r io.Reader
	p *progress
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.add(int64(n))
	return n, err
}

// statusWriter shows on p, as its status, the last line written to it.
type statusWriter struct{ p *progress }

func (w statusWriter) Write(b []byte) (int, error) {
	lines := strings.Split(strings.TrimRight(string(b), "\r\n"), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		w.p.setStatus(last)
	}
	return len(b), nil
}
