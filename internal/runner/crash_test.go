package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/failpoint"
	"github.com/ptah-run/ptah/internal/pgtest"
)

// Crash tests run one pass in a child process that dies at a failpoint, and
// then assert what the next pass, in the test process, makes of what was
// left. The child is this test binary again, which TestMain turns into
// runCrashChild when helperEnv is set (no test runs in it).
//
// The child never starts a PostgreSQL server of its own: pgtest.Main only
// stops a server that was started, and a server is only started by the
// first pgtest.BaseURL/NewDB call, which the child never makes. It is given
// the parent's database URL in helperEnv, and PTAH_TEST_DATABASE_URL points
// at the same server as a second guard, so that even a pgtest call would
// reuse the parent's server instead of starting one.

// helperEnv carries the child's helperRequest, as JSON.
const helperEnv = "PTAH_RUNNER_CRASH_HELPER"

// helperRequest is what the child runs: one Run of Resource in Mode
// against the store in the database at URL.
type helperRequest struct {
	URL      string
	Resource Resource
	Mode     Mode
}

// helperNoCrash is the child's exit status when its run ended without
// reaching the failpoint: the test set up the wrong situation.
const helperNoCrash = 3

// runCrashChild is the child of crashAt: TestMain runs it, instead of the
// tests, when helperEnv carries a request. It never returns.
func runCrashChild(raw string) {
	var req helperRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		fmt.Fprintln(os.Stderr, "helper: decoding the request:", err)
		os.Exit(helperNoCrash)
	}
	req.Resource.ReadSource()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := newRunner(ctx, req.URL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(helperNoCrash)
	}
	// A failpoint ends the process inside Run, with os.Exit(failpoint.ExitCode).
	out, err := r.Run(ctx, req.Resource, req.Mode)
	fmt.Fprintf(os.Stderr, "helper: the run ended without reaching failpoint %q: phase %s (%s), error %v\n",
		os.Getenv(failpoint.EnvVar), out.Status.Phase, out.Status.Message, err)
	os.Exit(helperNoCrash)
}

// crashAt runs res in mode in a child process that must die at the named
// failpoint, and returns once the server has ended every session the child
// had: a process that died is then, to the next pass, exactly what it is
// after a real crash.
func (f *fixture) crashAt(point string, res Resource, mode Mode) {
	f.t.Helper()
	runCrashChildAt(f.t, childCommand(f.t, f.url, res, mode, point), point)
	f.waitForChildSessions()
}

// childCommand is the crash child that runs res in mode against the
// database at url, stopping dead at failpoint point (at none when point
// is "").
func childCommand(t testing.TB, url string, res Resource, mode Mode, point string) *exec.Cmd {
	t.Helper()
	raw, err := json.Marshal(helperRequest{URL: url, Resource: res, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+string(raw), pgtest.EnvURL+"="+url)
	if point != "" {
		cmd.Env = append(cmd.Env, failpoint.EnvVar+"="+point)
	}
	return cmd
}

// runCrashChildAt runs cmd, which must die at failpoint point.
func runCrashChildAt(t testing.TB, cmd *exec.Cmd, point string) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != failpoint.ExitCode {
		t.Fatalf("the child was to die at failpoint %s (exit %d); it ended with %v:\n%s", point, failpoint.ExitCode, err, out)
	}
}

// crashChildAt is crashAt for a test that keeps sessions of its own on
// the database (observer among them, through which it looks): the
// sessions connected when the child starts are the test's, and it
// returns once every other session is gone.
func crashChildAt(t testing.TB, url string, observer *pgx.Conn, point string, res Resource, mode Mode) {
	t.Helper()
	own := clientSessions(t, observer)
	runCrashChildAt(t, childCommand(t, url, res, mode, point), point)
	waitForOr(t, "the crashed child's sessions to end", func() string { return sessions(observer) },
		func() bool { return onlySessions(t, observer, own) })
}

// clientSessions are the client sessions connected to observer's
// database now, observer's own among them.
func clientSessions(t testing.TB, observer *pgx.Conn) map[int32]bool {
	t.Helper()
	rows, err := observer.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]bool{}
	for _, pid := range pids {
		out[pid] = true
	}
	return out
}

// onlySessions reports whether every client session of observer's
// database is one of keep. (pg_stat_activity is read afresh each time:
// observer is not in a transaction.)
func onlySessions(t testing.TB, observer *pgx.Conn, keep map[int32]bool) bool {
	t.Helper()
	for pid := range clientSessions(t, observer) {
		if !keep[pid] {
			return false
		}
	}
	return true
}

// waitForChildSessions waits until no session but the test's own is
// connected to the test database. The server notices a dead client's
// sockets at once, but ending its backends takes a moment; until then a
// writer session would look alive (and must, to the next pass).
func (f *fixture) waitForChildSessions() {
	f.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var others int
		err := f.r.Target.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend'
			AND pid <> pg_backend_pid()`).Scan(&others)
		if err != nil {
			f.t.Fatal(err)
		}
		if others == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d sessions of the crashed child are still connected after 30s", others)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killWhileWriterWaits runs res in Apply mode in a child process, holds a
// lock on table users until the child's writer waits for it, and kills the
// child with SIGKILL there. It returns the lock's transaction, still open:
// the writer's backend outlives its client, still waiting, and may still
// write once the lock is granted. The child's other sessions are gone when
// it returns.
func (f *fixture) killWhileWriterWaits(res Resource) (locker pgx.Tx, writerPID int32) {
	f.t.Helper()
	return killWhileWriterWaitsOn(f.t, f.url, f.r.Target, "public.users", res)
}

// killWhileWriterWaitsOn is killWhileWriterWaits for any resource and any
// table: a session of its own holds table in SHARE mode, from before the
// child starts; observer is a session of the test's on the database, and
// the sessions connected when the child starts are left alone.
func killWhileWriterWaitsOn(t testing.TB, url string, observer *pgx.Conn, table string, res Resource) (locker pgx.Tx, writerPID int32) {
	t.Helper()
	ctx := context.Background()
	lockConn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lockConn.Close(ctx) })
	locker, err = lockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Exec(ctx, "LOCK TABLE "+table+" IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	own := clientSessions(t, observer)
	cmd := childCommand(t, url, res, Apply, "")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	// On the table's lock itself, not on another: opening the writer may
	// wait a moment on the advisory lock that serializes creating ptah's
	// tables. And in this test's database: tests run in parallel on one
	// server.
	waitFor(t, "the child's writer to wait on the lock", func() bool {
		err := observer.QueryRow(ctx, `SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
			WHERE a.datname = current_database() AND a.application_name LIKE 'ptah writer %'
			AND l.locktype = 'relation' AND NOT l.granted AND l.relation = $1::regclass`, table).Scan(&writerPID)
		return err == nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	own[writerPID] = true
	waitForOr(t, "the killed child's sessions but its writer to end", func() string { return sessions(observer) },
		func() bool { return onlySessions(t, observer, own) })
	return locker, writerPID
}

// sessions describes the client sessions of observer's database.
func sessions(observer *pgx.Conn) string {
	rows, err := observer.Query(context.Background(), `SELECT pid, application_name, state, coalesce(wait_event_type, ''),
		coalesce(wait_event, ''), left(query, 120) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		return "; " + err.Error()
	}
	defer rows.Close()
	out := ""
	for rows.Next() {
		var pid int32
		var app, state, wt, we, q string
		if rows.Scan(&pid, &app, &state, &wt, &we, &q) == nil {
			out += fmt.Sprintf("\n  pid %d %q %s %s/%s: %s", pid, app, state, wt, we, q)
		}
	}
	return "; sessions:" + out
}

// waitForSessionEnd waits until the session of pid (an orphaned writer's)
// has ended.
func (f *fixture) waitForSessionEnd(pid int32) {
	f.t.Helper()
	ctx := context.Background()
	f.eventually("the orphaned writer's session to end", func() bool {
		var gone bool
		_, err := f.r.Target.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
		if err == nil {
			err = f.r.Target.QueryRow(ctx, "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&gone)
		}
		return err == nil && gone
	})
}

// eventually polls cond until it holds, failing the test after a minute.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	waitFor(f.t, what, cond)
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitForOr(t, what, func() string { return "" }, cond)
}

// waitForOr is waitFor, with what describe says added to the failure.
func waitForOr(t testing.TB, what string, describe func() string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s%s", what, describe())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
