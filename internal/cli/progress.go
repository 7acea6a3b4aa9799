package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/ptah-run/ptah/internal/postgres"
)

// stepPrinter shows, on stderr, the statements of a plan as they run. On a
// terminal, the running statement's line shows its elapsed time, redrawn
// while it runs; elsewhere (CI logs, pipes) each statement gets one line
// once it has run, with the time it took. Either way a statement's final
// line reads
//
//	app [2/7] 35ms  CREATE INDEX posts_author ON public.posts (author_id)
//
// with the transaction named when the plan runs in more than one, or, for a
// migration, the version of the file the statement belongs to.
type stepPrinter struct {
	w    io.Writer
	name string
	live bool
	// every is how often a live line is redrawn.
	every time.Duration

	mu      sync.Mutex
	running *postgres.Step // the statement in flight, nil when none
	started time.Time
	ticker  *time.Ticker
	done    chan struct{}
}

func newStepPrinter(w io.Writer, name string, live bool) *stepPrinter {
	return &stepPrinter{w: w, name: name, live: live, every: 250 * time.Millisecond}
}

// step is the printer's postgres.ProgressFunc.
func (p *stepPrinter) step(st postgres.Step) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st.Waiting != "" {
		// The statement in flight could not take its locks in one
		// attempt: a line of its own says whom it waits for, and the
		// running line goes on.
		if p.live {
			io.WriteString(p.w, "\r\x1b[K")
		}
		fmt.Fprintf(p.w, "%s [%d/%d] waiting %s for %s\n", p.name, st.N, st.Total, roundDuration(st.Elapsed), st.Waiting)
		return
	}
	if !st.Done {
		p.running, p.started = &st, time.Now()
		if p.live {
			p.draw(st, 0, false)
			p.tick()
		}
		return
	}
	p.running = nil
	if p.live {
		io.WriteString(p.w, "\r\x1b[K")
	}
	p.draw(st, st.Elapsed, true)
}

// tick starts redrawing the live line, once.
func (p *stepPrinter) tick() {
	if p.ticker != nil {
		return
	}
	p.ticker, p.done = time.NewTicker(p.every), make(chan struct{})
	go func(t *time.Ticker, done chan struct{}) {
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			p.mu.Lock()
			if p.running != nil {
				io.WriteString(p.w, "\r\x1b[K")
				p.draw(*p.running, time.Since(p.started), false)
			}
			p.mu.Unlock()
		}
	}(p.ticker, p.done)
}

// finish ends the display: a statement still in flight (it failed, or the
// run was interrupted) gets a line saying it stopped, and after how long.
func (p *stepPrinter) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ticker != nil {
		p.ticker.Stop()
		close(p.done)
		p.ticker = nil
	}
	if p.running != nil {
		if p.live {
			io.WriteString(p.w, "\r\x1b[K")
		}
		p.drawStopped(*p.running, time.Since(p.started))
	}
	p.running = nil
}

func (p *stepPrinter) draw(st postgres.Step, elapsed time.Duration, end bool) {
	took := ""
	if end || elapsed > 0 {
		took = roundDuration(elapsed).String()
	}
	p.line(st, took, end)
}

func (p *stepPrinter) drawStopped(st postgres.Step, elapsed time.Duration) {
	p.line(st, "stopped after "+roundDuration(elapsed).String(), true)
}

func (p *stepPrinter) line(st postgres.Step, took string, end bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%d/%d]", p.name, st.N, st.Total)
	switch {
	case st.Version != "":
		// A migration's phases are its files: name the file's version,
		// and whether its statements commit one by one.
		fmt.Fprintf(&b, " version %s", st.Version)
		if st.NoTransaction {
			b.WriteString(" (no transaction)")
		}
	case st.NoTransaction:
		// A statement that commits on its own: its phase is no
		// transaction.
		fmt.Fprintf(&b, " phase %d/%d (no transaction)", st.Phase, st.Phases)
	case st.Phases > 1:
		fmt.Fprintf(&b, " tx %d/%d", st.Phase, st.Phases)
	}
	if took != "" {
		b.WriteString(" " + took)
	}
	width := 100
	if p.live {
		width = 60 // one terminal line, which \r redraws
	}
	b.WriteString("  " + statementLine(st.Statement.SQL, width))
	if end {
		b.WriteString("\n")
	}
	io.WriteString(p.w, b.String())
}

// roundDuration keeps what a reader compares: milliseconds below a second,
// tenths of a second above.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// statementLine is the first line of sql, cut to at most n characters.
func statementLine(sql string, n int) string {
	first, rest, more := strings.Cut(strings.TrimSpace(sql), "\n")
	if r := []rune(first); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	if more && strings.TrimSpace(rest) != "" {
		return first + " ..."
	}
	return first
}
