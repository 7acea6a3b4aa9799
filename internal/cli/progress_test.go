package cli

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ptah-run/ptah/internal/postgres"
)

func TestStepPrinter(t *testing.T) {
	t.Parallel()
	stmt := func(sql string) postgres.Statement { return postgres.Statement{SQL: sql} }
	steps := []postgres.Step{
		{N: 1, Total: 3, Phase: 1, Phases: 2, Statement: stmt("ALTER TYPE public.mood ADD VALUE 'meh'")},
		{N: 1, Total: 3, Phase: 1, Phases: 2, Statement: stmt("ALTER TYPE public.mood ADD VALUE 'meh'"), Done: true, Elapsed: 1234 * time.Microsecond},
		{N: 2, Total: 3, Phase: 2, Phases: 2, Statement: stmt("CREATE TABLE public.a (\n    id integer\n)")},
		{N: 2, Total: 3, Phase: 2, Phases: 2, Statement: stmt("CREATE TABLE public.a (\n    id integer\n)"), Done: true, Elapsed: 2345 * time.Millisecond},
		{N: 3, Total: 3, Phase: 2, Phases: 2, Statement: stmt("CREATE INDEX a_id ON public.a (id)")},
	}

	// Not a terminal: one line per statement once it ran, and one for the
	// statement that never finished.
	var log bytes.Buffer
	p := newStepPrinter(&log, "app", false)
	for _, st := range steps {
		p.step(st)
	}
	p.finish()
	want := regexp.MustCompile(`^app \[1/3\] tx 1/2 1ms  ALTER TYPE public.mood ADD VALUE 'meh'
app \[2/3\] tx 2/2 2.3s  CREATE TABLE public.a \( \.\.\.
app \[3/3\] tx 2/2 stopped after \d+(\.\d+)?(ms|µs|ns|s)  CREATE INDEX a_id ON public.a \(id\)
$`)
	if !want.MatchString(log.String()) {
		t.Errorf("log output:\n%s", log.String())
	}

	// A terminal: the running statement is drawn when it starts and
	// redrawn in place with its elapsed time.
	var tty syncBuffer
	p = newStepPrinter(&tty, "app", true)
	p.every = time.Millisecond
	p.step(steps[4])
	time.Sleep(50 * time.Millisecond)
	p.finish()
	out := tty.String()
	if !strings.HasPrefix(out, "app [3/3] tx 2/2  CREATE INDEX") || !regexp.MustCompile(`\r\x1b\[Kapp \[3/3\] tx 2/2 \d+ms  CREATE INDEX`).MatchString(out) ||
		!strings.HasSuffix(out, "CREATE INDEX a_id ON public.a (id)\n") || !strings.Contains(out, "stopped after") {
		t.Errorf("terminal output: %q", out)
	}
}

// A migration's statements are named by their file's version, and a file
// run without a transaction says so: its statements commit one by one.
func TestStepPrinterNamesTheMigrationVersion(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	p := newStepPrinter(&log, "app", false)
	for _, st := range []postgres.Step{
		{N: 1, Total: 2, Phase: 1, Phases: 2, Version: "0003", Statement: postgres.Statement{SQL: "CREATE TABLE t (id int)"}, Done: true,
			Elapsed: 3 * time.Millisecond},
		{N: 2, Total: 2, Phase: 2, Phases: 2, Version: "4", NoTransaction: true, Statement: postgres.Statement{SQL: "CREATE INDEX CONCURRENTLY t_id ON t (id)"},
			Done: true, Elapsed: 5 * time.Millisecond},
	} {
		p.step(st)
	}
	p.finish()
	want := "app [1/2] version 0003 3ms  CREATE TABLE t (id int)\n" +
		"app [2/2] version 4 (no transaction) 5ms  CREATE INDEX CONCURRENTLY t_id ON t (id)\n"
	if log.String() != want {
		t.Errorf("log output:\n%s\nwant:\n%s", log.String(), want)
	}
}

func TestStatementLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ sql, want string }{
		{"SELECT 1", "SELECT 1"},
		{"  CREATE TABLE a (\n id int\n)\n", "CREATE TABLE a ( ..."},
		{"COMMENT ON TABLE a IS 'é" + strings.Repeat("x", 20) + "'", "COMMENT ON TABLE a IS 'éxxx..."},
	} {
		if got := statementLine(tt.sql, 30); got != tt.want {
			t.Errorf("statementLine(%q) = %q, want %q", tt.sql, got, tt.want)
		}
	}
}

// syncBuffer is a bytes.Buffer the printer's redrawing goroutine and the
// test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A statement that cannot take its locks at once says whom it waits for,
// on a line of its own, and its own line still tells how long it ran.
func TestStepPrinterSaysWhomAStatementWaitsFor(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	p := newStepPrinter(&log, "app", false)
	alter := postgres.Statement{SQL: "ALTER TABLE public.t ADD COLUMN c integer"}
	for _, st := range []postgres.Step{
		{N: 1, Total: 1, Phase: 1, Phases: 1, Statement: alter},
		{N: 1, Total: 1, Phase: 1, Phases: 1, Statement: alter, Elapsed: 1200 * time.Millisecond,
			Waiting: "AccessExclusiveLock on public.t, held by pid 42 (psql, idle in transaction since 12:00:01 UTC)"},
		{N: 1, Total: 1, Phase: 1, Phases: 1, Statement: alter, Done: true, Elapsed: 2 * time.Second},
	} {
		p.step(st)
	}
	p.finish()
	want := "app [1/1] waiting 1.2s for AccessExclusiveLock on public.t, held by pid 42 (psql, idle in transaction since 12:00:01 UTC)\n" +
		"app [1/1] 2s  ALTER TABLE public.t ADD COLUMN c integer\n"
	if log.String() != want {
		t.Errorf("log output:\n%s\nwant:\n%s", log.String(), want)
	}
}
