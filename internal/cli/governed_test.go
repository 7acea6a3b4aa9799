package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// project is a target database and a ptah.yaml declaring it, in a temporary
// directory; the URL reaches ptah through spec.target.urlFrom.file, so tests
// need neither the working directory nor the environment and run in
// parallel.
type project struct {
	t    *testing.T
	url  string
	file string
	// started, when set, hears of each ptah process as it starts.
	started func(*os.Process)
}

const (
	// Two statements, so that a crash can fall between them.
	crashBefore   = "CREATE TABLE users (id int PRIMARY KEY);"
	crashDeclared = "CREATE TABLE users (id int PRIMARY KEY, email text);\nCREATE TABLE posts (id int PRIMARY KEY);"
)

func newProject(t *testing.T, before, declared string) *project {
	t.Helper()
	return newProjectOf(t, before, api.KindPtahSchema, "schema", map[string]string{"001.sql": declared})
}

// newProjectOf is a project of one resource of kind named app, policy
// Always, whose files (name -> contents) are in dir, on a fresh database
// where before ran.
func newProjectOf(t *testing.T, before, kind, dir string, files map[string]string) *project {
	t.Helper()
	url := pgtest.NewDB(t)
	if before != "" {
		pgtest.Exec(t, url, before)
	}
	root := t.TempDir()
	all := map[string]string{
		"url": url,
		"ptah.yaml": fmt.Sprintf(`apiVersion: ptah.run/v1alpha1
kind: %s
metadata:
  name: app
spec:
  target:
    urlFrom: {file: url}
  source:
    path: %s
  policy:
    apply: Always
    lockTimeout: 30s
    lockAttemptTimeout: 30s  # one attempt: these tests stage a writer waiting on a lock
`, kind, dir),
	}
	for name, body := range files {
		all[dir+"/"+name] = body
	}
	writeFiles(t, root, all)
	return &project{t: t, url: url, file: filepath.Join(root, "ptah.yaml")}
}

// writeFiles writes files (path below dir -> contents), creating their
// directories.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ptah runs ptah as a separate process, as a user would, with extra
// environment: this test binary, started with argv[0] "ptah", which
// TestMain (testscript.Main) runs as ptah.
func (p *project) ptah(env []string, args ...string) (code int, stdout, stderr string) {
	p.t.Helper()
	self, err := os.Executable()
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(self, append(args, "-f", p.file)...)
	cmd.Args[0] = "ptah"
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if p.started != nil {
		if err := cmd.Start(); err != nil {
			p.t.Fatal(err)
		}
		p.started(cmd.Process)
		err = cmd.Wait()
	} else {
		err = cmd.Run()
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		p.t.Fatalf("running ptah: %v", err)
	}
	return code, out.String(), errb.String()
}

// lockUsers holds a SHARE lock on table users, in a transaction of its own
// session, until the transaction ends (or the test does). A plan that alters
// users waits for it inside its own transaction.
func (p *project) lockUsers() pgx.Tx {
	p.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE users IN SHARE MODE"); err != nil {
		p.t.Fatal(err)
	}
	return tx
}

// whenWriterWaits watches, from a session of its own (the locker's open
// transaction would keep one snapshot of pg_stat_activity), for a journaled
// writer waiting on the lock tx holds; then it calls act with that writer's
// pid and ends tx. The channel closes when it is done.
func (p *project) whenWriterWaits(tx pgx.Tx, act func(watcher *pgx.Conn, writerPID int32)) <-chan struct{} {
	ctx := context.Background()
	watcher, err := pgx.Connect(ctx, p.url)
	if err != nil {
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer watcher.Close(ctx)
		defer func() { _ = tx.Commit(ctx) }()
		for range 600 {
			var pid int32
			err := watcher.QueryRow(ctx, `SELECT r.writer_pid FROM ptah.runs r JOIN pg_stat_activity a ON a.pid = r.writer_pid
				WHERE r.finished_at IS NULL AND a.wait_event_type = 'Lock' AND a.wait_event = 'relation'`).Scan(&pid)
			if err == nil {
				act(watcher, pid)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		p.t.Errorf("no writer waited on the lock within a minute")
	}()
	return done
}

// interruptWhenWriterWaits makes the next ptah the project runs get
// Ctrl-C once its writer waits for the lock tx holds, and lets the lock go
// only once the interrupt has stopped the statement (the writer no longer
// waits): else, on a busy machine, the lock could be granted and the
// statement commit before ptah handles the signal.
func (p *project) interruptWhenWriterWaits(tx pgx.Tx) {
	p.started = func(proc *os.Process) {
		p.whenWriterWaits(tx, func(watcher *pgx.Conn, writer int32) {
			_ = proc.Signal(os.Interrupt)
			for range 300 {
				var waiting bool
				if err := watcher.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
					WHERE pid = $1 AND wait_event_type = 'Lock')`, writer).Scan(&waiting); err != nil || !waiting {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

func (p *project) query(sql string, dest ...any) {
	p.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
}

// runs is the journal: how many runs there are and how many committed.
func (p *project) runs() (total, committed int) {
	p.query(`SELECT count(*), count(*) FILTER (WHERE outcome = 'succeeded') FROM ptah.runs`, &total, &committed)
	return total, committed
}

func (p *project) status() statusItem {
	p.t.Helper()
	code, out, errs := p.ptah(nil, "status", "-o", "json")
	if code != 0 {
		p.t.Fatalf("ptah status: exit %d: %s", code, errs)
	}
	var doc statusOutput
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Items) != 1 {
		p.t.Fatalf("ptah status -o json: %v\n%s", err, out)
	}
	return doc.Items[0]
}

// TestApplyCrashRecovery kills ptah apply at each failpoint and runs it
// again: the second run must end InSync, no statement may have run twice
// (a second CREATE TABLE would fail the run), and the journal must hold
// exactly the runs the crash point allows.
func TestApplyCrashRecovery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		point string
		// the journal after recovery: runs recorded, runs committed
		total, committed int
		// the outcome of the last run the status records
		lastOutcome string
	}{
		// Claimed, never dispatched: the claim is re-derived and runs.
		{runner.FailAfterClaim, 1, 1, "Succeeded"},
		// Dispatched (the marker commits with the run's journal row), died
		// before any SQL: never run again; observed, and a new operation
		// does the work.
		{runner.FailAfterDispatch, 2, 1, "Succeeded"},
		// Died inside the transaction: it rolled back with the session;
		// observed, and a new operation does the work.
		{failpoint.MidPlan, 2, 1, "Succeeded"},
		// Committed, died before accounting: observed as done; nothing runs.
		{runner.FailAfterExecution, 1, 1, "Observed"},
		// Accounted, died before releasing the lease: the owed release is
		// completed first; nothing runs.
		{runner.FailBeforeRelease, 1, 1, "Succeeded"},
	}
	for _, tt := range tests {
		t.Run(tt.point, func(t *testing.T) {
			t.Parallel()
			p := newProject(t, crashBefore, crashDeclared)
			code, _, stderr := p.ptah([]string{failpoint.EnvVar + "=" + tt.point}, "apply")
			if code != failpoint.ExitCode || !strings.Contains(stderr, "failpoint "+tt.point) {
				t.Fatalf("the first apply must stop at %s: exit %d, stderr %s", tt.point, code, stderr)
			}
			code, stdout, stderr := p.ptah(nil, "apply")
			if code != 0 || !strings.Contains(stdout, "InSync") {
				t.Fatalf("apply after a crash at %s: exit %d\n%s%s", tt.point, code, stdout, stderr)
			}
			total, committed := p.runs()
			if total != tt.total || committed != tt.committed {
				t.Errorf("journal: %d runs, %d committed; want %d, %d", total, committed, tt.total, tt.committed)
			}
			var posts, email bool
			p.query(`SELECT to_regclass('public.posts') IS NOT NULL,
				EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'public.users'::regclass AND attname = 'email')`, &posts, &email)
			if !posts || !email {
				t.Errorf("after recovery the declared schema must exist: posts %v, users.email %v", posts, email)
			}
			st := p.status()
			if st.Lease != nil {
				t.Errorf("the lease must be free after recovery: %+v", st.Lease)
			}
			s := st.Status
			if s.Phase != "InSync" || s.ActiveOperation != nil || s.PendingObservation != nil || s.OwedRelease != nil {
				t.Errorf("status after recovery: %+v", s)
			}
			if s.Applied == nil || s.Applied.Outcome != tt.lastOutcome {
				t.Errorf("applied record: %+v; want outcome %s", s.Applied, tt.lastOutcome)
			}
			if again, out, _ := p.ptah(nil, "apply"); again != 0 || !strings.Contains(out, "InSync") {
				t.Errorf("a third apply: exit %d %s", again, out)
			}
			if total2, _ := p.runs(); total2 != total {
				t.Errorf("a third apply ran something: %d runs, was %d", total2, total)
			}
		})
	}
}

// TestConcurrentApplyOneWriter starts eight ptah apply processes on one
// database at once. A session holding a SHARE lock on the table the plan
// alters keeps the first run waiting inside its transaction for a few
// seconds, so the others arrive while it runs: exactly one executes, and
// every other either reports who holds the resource and exits 11, or
// arrives after it and finds nothing to do.
func TestConcurrentApplyOneWriter(t *testing.T) {
	t.Parallel()
	p := newProject(t, crashBefore, crashDeclared)
	const n = 8
	var finished atomic.Int32
	// The lock on users is held until one writer waits on it and every
	// other process has ended: each of them met the first one running.
	released := p.whenWriterWaits(p.lockUsers(), func(*pgx.Conn, int32) {
		for finished.Load() < n-1 {
			time.Sleep(20 * time.Millisecond)
		}
	})

	type outcome struct {
		code           int
		stdout, stderr string
	}
	outcomes := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, stdout, stderr := p.ptah(nil, "apply")
			finished.Add(1)
			outcomes[i] = outcome{code, stdout, stderr}
		}()
	}
	wg.Wait()
	<-released

	executed, busy := 0, 0
	for i, o := range outcomes {
		switch {
		case o.code == 0 && strings.Contains(o.stdout, "Applied plan"):
			executed++
		case o.code == ExitBlocked && strings.Contains(o.stderr, "another ptah is running the pass of PtahSchema/default/app (ptah pid "):
			busy++
		default:
			t.Errorf("process %d: exit %d\nstdout: %s\nstderr: %s", i, o.code, o.stdout, o.stderr)
		}
	}
	total, committed := p.runs()
	if executed != 1 || total != 1 || committed != 1 {
		t.Errorf("%d processes reported applying, journal %d runs (%d committed); want exactly one", executed, total, committed)
	}
	if busy != n-1 {
		t.Errorf("%d processes reported the one running, want %d", busy, n-1)
	}
}

// TestApplyShowsEachStatement: each of the plan's three statements gets a
// line on stderr once it ran, with the time it took, terminal or not (a CI
// log); on a terminal the line is first drawn when the statement starts,
// then redrawn in place.
func TestApplyShowsEachStatement(t *testing.T) {
	t.Parallel()
	line := regexp.MustCompile(`(?m)^app \[(\d)/3\] \d+(\.\d+)?(ms|s|µs)  (\S.*)$`)
	for _, terminal := range []bool{true, false} {
		t.Run(fmt.Sprint("terminal=", terminal), func(t *testing.T) {
			t.Parallel()
			p := newProject(t, crashBefore, crashDeclared)
			var stdout, stderr bytes.Buffer
			a := newApp(&stdout, &stderr)
			a.stderrIsTerminal = func() bool { return terminal }
			if code := a.run(context.Background(), []string{"apply", "-f", p.file}); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			// What a terminal shows: of each line, what its last redraw
			// left (a statement that runs a while is redrawn as its time
			// ticks).
			var shown []string
			for _, l := range strings.Split(stderr.String(), "\n") {
				redraws := strings.Split(l, "\r\x1b[K")
				shown = append(shown, redraws[len(redraws)-1])
			}
			out := strings.Join(shown, "\n")
			var steps []string
			for _, m := range line.FindAllStringSubmatch(out, -1) {
				steps = append(steps, m[1])
			}
			if !slices.Equal(steps, []string{"1", "2", "3"}) || !strings.Contains(out, "[1/3] ") ||
				!strings.Contains(stderr.String(), "CREATE TABLE public.posts") {
				t.Fatalf("terminal=%v: statement lines %v, want 1, 2 and 3 with durations; stderr:\n%q", terminal, steps, stderr.String())
			}
			if redrawn := strings.Contains(stderr.String(), "\r\x1b[K"); redrawn != terminal {
				t.Fatalf("terminal=%v: lines redrawn in place: %v; stderr:\n%q", terminal, redrawn, stderr.String())
			}
		})
	}
}

// TestLostConnectionMidApplyIsNeverRetried: the writer's session is
// terminated while its plan waits on a lock. PostgreSQL rolls the
// transaction back; ptah reports the run failed, never runs that operation
// again, releases the lease the dead session could not release from its own
// session, and the next apply plans afresh under a new operation.
func TestLostConnectionMidApplyIsNeverRetried(t *testing.T) {
	t.Parallel()
	p := newProject(t, crashBefore, crashDeclared)
	ctx := context.Background()
	tx := p.lockUsers()
	// Once the writer waits on the lock, cut its connection.
	done := p.whenWriterWaits(tx, func(watcher *pgx.Conn, writerPID int32) {
		if _, err := watcher.Exec(ctx, "SELECT pg_terminate_backend($1)", writerPID); err != nil {
			t.Errorf("terminating the writer: %v", err)
		}
	})
	code, stdout, stderr := p.ptah(nil, "apply")
	<-done
	// The statement was cut before COMMIT was sent, so the transaction
	// certainly rolled back: the run failed, naming the statement. (Whether
	// the client reads the server's 57P01 or only the closed socket depends
	// on timing; either way it is that statement that failed.)
	// The statement is named where the person reads it (the progress line
	// it stopped at, or the journal's record of the failure); the status
	// never carries SQL.
	if code != ExitApplyFailed || !strings.Contains(stdout, "Failed.") || !strings.Contains(stdout+stderr, "ALTER TABLE public.users") {
		t.Fatalf("apply with its writer cut: exit %d\n%s%s", code, stdout, stderr)
	}
	var cut, committed int
	p.query(`SELECT count(*) FILTER (WHERE outcome IS DISTINCT FROM 'succeeded'), count(*) FILTER (WHERE outcome = 'succeeded') FROM ptah.runs`, &cut, &committed)
	if cut != 1 || committed != 0 {
		t.Fatalf("journal after the cut: %d runs not committed, %d committed; want 1, 0", cut, committed)
	}
	// The next apply completes the release the dead session could not do,
	// observes afresh and runs a new operation; the cut one never again.
	if code, out, errs := p.ptah(nil, "apply"); code != 0 || !strings.Contains(out, "InSync. Applied plan") {
		t.Fatalf("apply after the cut: exit %d\n%s%s", code, out, errs)
	}
	p.query(`SELECT count(*) FILTER (WHERE outcome IS DISTINCT FROM 'succeeded'), count(*) FILTER (WHERE outcome = 'succeeded') FROM ptah.runs`, &cut, &committed)
	if cut != 1 || committed != 1 {
		t.Fatalf("journal: %d runs not committed, %d committed; want the cut one and one new one", cut, committed)
	}
	if st := p.status(); st.Lease != nil || st.Status.PendingObservation != nil || st.Status.OwedRelease != nil || st.Status.Phase != "InSync" {
		t.Fatalf("status: %+v lease %+v", st.Status, st.Lease)
	}
}

// TestInterruptedApply: Ctrl-C while the plan waits inside its transaction.
// ptah exits 130; the transaction rolls back; what it recorded lets the next
// apply finish the job without running the interrupted operation again.
func TestInterruptedApply(t *testing.T) {
	t.Parallel()
	p := newProject(t, crashBefore, crashDeclared)
	tx := p.lockUsers()
	p.interruptWhenWriterWaits(tx)
	code, stdout, stderr := p.ptah(nil, "apply")
	p.started = nil
	t.Logf("interrupted apply: exit %d\n%s%s", code, stdout, stderr)
	if code != ExitInterrupted {
		t.Fatalf("interrupted apply: exit %d, want %d\n%s%s", code, ExitInterrupted, stdout, stderr)
	}
	// It says what became of the plan and what comes next, and does not
	// promise to continue what rolled back.
	if !regexp.MustCompile(`interrupted \(context canceled\): PtahSchema "app": plan \S+ rolled back: none of it was applied; the next ptah apply plans again`).MatchString(stderr) ||
		strings.Contains(stderr, "continues") {
		t.Fatalf("interrupted apply says:\n%s", stderr)
	}
	var total, committed int
	p.query(`SELECT count(*), count(*) FILTER (WHERE outcome = 'succeeded') FROM ptah.runs`, &total, &committed)
	if total != 1 || committed != 0 {
		t.Fatalf("journal after the interrupt: %d runs, %d committed; want 1, 0", total, committed)
	}
	// The run was accounted for despite the interrupt: it certainly rolled
	// back, and the record says so.
	if st := p.status(); st.Status.ActiveOperation != nil || st.Status.Applied == nil || st.Status.Applied.Outcome != "Failed" {
		t.Fatalf("status after the interrupt: %+v", st.Status)
	}
	if code, out, errs := p.ptah(nil, "apply"); code != 0 || !strings.Contains(out, "InSync. Applied plan") {
		t.Fatalf("apply after the interrupt: exit %d\n%s%s", code, out, errs)
	}
	p.query(`SELECT count(*), count(*) FILTER (WHERE outcome = 'succeeded') FROM ptah.runs`, &total, &committed)
	if total != 2 || committed != 1 {
		t.Fatalf("journal: %d runs, %d committed; want the interrupted one and one new one", total, committed)
	}
	if st := p.status(); st.Lease != nil || st.Status.Phase != "InSync" || st.Status.OwedRelease != nil {
		t.Fatalf("status: %+v lease %+v", st.Status, st.Lease)
	}
}

// TestStatusShowsTheRunInFlight: while an apply's writer waits on a lock,
// ptah status (another process) shows the run: Applying, the dispatched
// operation, the lease's connected writer, the lock it waits for and the
// session holding it; and a concurrent plan says the pass is busy.
func TestStatusShowsTheRunInFlight(t *testing.T) {
	t.Parallel()
	p := newProject(t, crashBefore, crashDeclared)
	tx := p.lockUsers()
	var lockerPID int32
	if err := tx.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&lockerPID); err != nil {
		t.Fatal(err)
	}
	var during statusItem
	var text, planErr string
	var planCode int
	done := p.whenWriterWaits(tx, func(*pgx.Conn, int32) {
		during = p.status()
		_, text, _ = p.ptah(nil, "status")
		planCode, _, planErr = p.ptah(nil, "plan")
	})
	if code, out, errs := p.ptah(nil, "apply"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errs)
	}
	<-done
	st := during.Status
	if st == nil || st.Phase != "Applying" || st.ActiveOperation == nil || st.ActiveOperation.DispatchedAt == nil {
		t.Fatalf("status during the run: %+v; want Applying with a dispatched operation", st)
	}
	l := during.Lease
	if l == nil || !l.WriterAlive || l.Operation != st.ActiveOperation.ID || l.Writer == nil ||
		l.Writer.WaitsFor != "AccessExclusiveLock on public.users" || len(l.Writer.BlockedBy) != 1 || l.Writer.BlockedBy[0].PID != lockerPID ||
		!strings.Contains(l.Writer.Statement, "ALTER TABLE public.users") || l.Writer.Run == nil {
		t.Fatalf("lease during the run: %+v (writer %+v); want the connected writer waiting on users, held by pid %d", l, l.Writer, lockerPID)
	}
	if !strings.Contains(text, "writer:") || !strings.Contains(text, fmt.Sprintf("held by pid %d", lockerPID)) {
		t.Fatalf("status text during the run:\n%s", text)
	}
	if planCode != ExitBlocked || !strings.Contains(planErr, "another ptah is running the pass") {
		t.Fatalf("plan during the run: exit %d: %s", planCode, planErr)
	}
}

// TestPlanNeverHangsBehindALock: a session holding ACCESS EXCLUSIVE on a
// managed table makes reading the catalog wait. ptah plan says what it
// waits for, and who holds it, after a second, and gives up at
// --observe-timeout with exit 17, naming the holder.
func TestPlanNeverHangsBehindALock(t *testing.T) {
	t.Parallel()
	// A default: reading it (pg_get_expr) opens the table.
	const before = "CREATE TABLE users (id int PRIMARY KEY, created timestamptz DEFAULT now());"
	p := newProject(t, before, before+"\nCREATE TABLE posts (id int PRIMARY KEY);")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE users IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	holder := conn.PgConn().PID()
	for _, args := range [][]string{{"plan", "--no-publish"}, {"plan"}, {"apply"}} {
		code, stdout, stderr := p.ptah(nil, append(args, "--observe-timeout", "3s")...)
		waits := fmt.Sprintf("reading the target's catalog waits for AccessShareLock on public.users, held by pid %d", holder)
		if code != ExitObserveTimeout || !strings.Contains(stderr, waits) ||
			!strings.Contains(stderr, "waited more than 3s for AccessShareLock on public.users") || strings.Contains(stdout, "Plan:") {
			t.Fatalf("ptah %v behind a lock: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
	}
}

// newMigrationProject is newProject for a PtahMigration of files (name ->
// SQL), policy Always.
func newMigrationProject(t *testing.T, before string, files map[string]string) *project {
	t.Helper()
	return newProjectOf(t, before, api.KindPtahMigration, "migrations", files)
}

// TestInterruptedMigrationApply interrupts ptah apply while the second
// file of a migration waits for a lock: the first file stays applied, the
// second rolls back, and ptah says so, by version; the next apply runs the
// second file only.
func TestInterruptedMigrationApply(t *testing.T) {
	t.Parallel()
	p := newMigrationProject(t, crashBefore, map[string]string{
		"1_posts.sql": "CREATE TABLE posts (id int PRIMARY KEY);",
		"2_email.sql": "ALTER TABLE users ADD COLUMN email text;",
	})
	tx := p.lockUsers()
	p.interruptWhenWriterWaits(tx)
	code, stdout, stderr := p.ptah(nil, "apply")
	p.started = nil
	t.Logf("interrupted apply: exit %d\n%s%s", code, stdout, stderr)
	if code != ExitInterrupted {
		t.Fatalf("interrupted apply: exit %d, want %d\n%s%s", code, ExitInterrupted, stdout, stderr)
	}
	if !regexp.MustCompile(`interrupted \(context canceled\): PtahMigration "app": the run failed: version 2 .*rolled back.*; committed before it, and applied: 1 `).
		MatchString(stderr) {
		t.Fatalf("interrupted apply says:\n%s", stderr)
	}
	var history string
	p.query(`SELECT string_agg(version, ',' ORDER BY version) FROM ptah.migration_history`, &history)
	if history != "1" {
		t.Fatalf("history after the interrupt: %s, want 1", history)
	}
	if code, out, errs := p.ptah(nil, "apply"); code != 0 || !strings.Contains(out, "InSync. Applied version 2 ") {
		t.Fatalf("apply after the interrupt: exit %d\n%s%s", code, out, errs)
	}
}

// TestConcurrentMigrationApplyRunsEachFileOnce: eight ptah apply processes
// at once on one PtahMigration run each pending file exactly once in
// total: every file appends a row to a log table (a second run of a file
// would append it twice), the history records each version once, and
// every process either applied, found nothing left to do, or reported
// the pass busy (exit 11).
func TestConcurrentMigrationApplyRunsEachFileOnce(t *testing.T) {
	t.Parallel()
	const versions = 6
	files := map[string]string{}
	for v := 1; v <= versions; v++ {
		files[fmt.Sprintf("%d_step.sql", v)] = fmt.Sprintf("INSERT INTO public.log VALUES ('%d');\nCREATE TABLE public.t%d (id int);\n", v, v)
	}
	p := newMigrationProject(t, "CREATE TABLE public.log (version text)", files)
	const n = 8
	type outcome struct {
		code           int
		stdout, stderr string
	}
	outcomes := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, stdout, stderr := p.ptah(nil, "apply")
			outcomes[i] = outcome{code, stdout, stderr}
		}()
	}
	wg.Wait()
	applied := 0
	for i, o := range outcomes {
		switch {
		case o.code == 0 && strings.Contains(o.stdout, "InSync. Applied versions"):
			applied++
		case o.code == 0 && strings.Contains(o.stdout, "InSync."):
		case o.code == ExitBlocked && strings.Contains(o.stderr, "another ptah is running the pass of PtahMigration/default/app"):
		default:
			t.Errorf("process %d: exit %d\nstdout: %s\nstderr: %s", i, o.code, o.stdout, o.stderr)
		}
	}
	var logged, recorded, runs int
	p.query(`SELECT (SELECT count(*) FROM public.log), (SELECT count(DISTINCT version) FROM public.log WHERE true),
		(SELECT count(*) FROM ptah.runs)`, &logged, &recorded, &runs)
	if applied != 1 || logged != versions || recorded != versions || runs != 1 {
		t.Fatalf("%d processes applied, the log has %d rows of %d versions, the journal %d runs; want 1 and each of %d files once",
			applied, logged, recorded, runs, versions)
	}
	var history int
	p.query(`SELECT count(*) FROM ptah.migration_history WHERE how = 'run'`, &history)
	if history != versions {
		t.Fatalf("the history records %d versions, want %d", history, versions)
	}
}
