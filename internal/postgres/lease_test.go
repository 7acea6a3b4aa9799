package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/pgtest"
)

const testDigest = "sha256:7d0c1a5e"

// openWriter opens a writer with an hour to run, released when the test ends.
func openWriter(t *testing.T, url, digest, operationID string) *Writer {
	t.Helper()
	w, err := OpenWriter(testCtx(t), url, digest, operationID, "PtahSchema/default/app", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("OpenWriter(%s): %v", operationID, err)
	}
	t.Cleanup(func() { _ = w.Release(context.Background()) })
	return w
}

// wantHeld asserts err is ErrLeaseHeld naming holder.
func wantHeld(t *testing.T, err error, holder string) *LeaseHeldError {
	t.Helper()
	var held *LeaseHeldError
	if !errors.Is(err, ErrLeaseHeld) || !errors.As(err, &held) {
		t.Fatalf("err = %v, want ErrLeaseHeld", err)
	}
	if held.Holder != holder {
		t.Fatalf("LeaseHeldError.Holder = %q, want %q (%v)", held.Holder, holder, err)
	}
	return held
}

func mustLease(t *testing.T, conn *pgx.Conn, digest string) *Lease {
	t.Helper()
	l, err := LeaseHolder(testCtx(t), conn, digest)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// advisoryHolder returns the pid holding digest's advisory lock, or 0.
func advisoryHolder(t *testing.T, conn *pgx.Conn, digest string) int32 {
	t.Helper()
	pid, err := lockHolderPID(testCtx(t), conn, AdvisoryLockKey(digest))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestOpenWriterTakesTheLeaseAndRefusesASecondWriter(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)

	w := openWriter(t, url, testDigest, "op-1")
	l := mustLease(t, observer, testDigest)
	if l == nil || l.Holder != "op-1" || l.Resource != "PtahSchema/default/app" || !l.Writer.Same(w.Session()) ||
		!l.Deadline.Equal(w.Deadline().Truncate(time.Microsecond)) {
		t.Fatalf("lease = %+v, want op-1 held by %v until %v", l, w.Session(), w.Deadline())
	}
	if pid := advisoryHolder(t, observer, testDigest); pid != w.Session().PID {
		t.Fatalf("advisory lock held by pid %d, want the writer's %d", pid, w.Session().PID)
	}

	_, err := OpenWriter(ctx, url, testDigest, "op-2", "PtahSchema/default/other", time.Now().Add(time.Hour))
	held := wantHeld(t, err, "op-1")
	if held.WriterPID != w.Session().PID || held.Resource != "PtahSchema/default/app" {
		t.Errorf("LeaseHeldError = %+v, want the first writer's pid and resource", held)
	}
	// The loser left nothing behind: its session ends (the server takes a
	// moment to notice the closed connection), the lease is intact.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var losers int
		if _, err := observer.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			t.Fatal(err)
		}
		if err := observer.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ptah writer op-2'").Scan(&losers); err != nil {
			t.Fatal(err)
		}
		if losers == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d session(s) of the refused writer are still open", losers)
		}
	}
	if l := mustLease(t, observer, testDigest); l.Holder != "op-1" {
		t.Errorf("lease holder after a refused writer = %s, want op-1", l.Holder)
	}

	// Another digest is another lease.
	openWriter(t, url, testDigest+"-other", "op-3")
}

func TestOpenWriterRefusesAPassedDeadline(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	_, err := OpenWriter(testCtx(t), url, testDigest, "op-1", "", time.Now().Add(-time.Minute))
	if !errors.Is(err, ErrDeadlinePassed) {
		t.Fatalf("OpenWriter(past deadline) = %v, want ErrDeadlinePassed", err)
	}
	observer := dial(t, url)
	if l := mustLease(t, observer, testDigest); l != nil {
		t.Errorf("a refused writer recorded a lease: %+v", l)
	}
	if pid := advisoryHolder(t, observer, testDigest); pid != 0 {
		t.Errorf("a refused writer left the advisory lock held by pid %d", pid)
	}
}

// TestLeaseTakeoverAfterWriterSessionKilled: once the writer's session is
// gone from the server, its lease row no longer holds the database.
func TestLeaseTakeoverAfterWriterSessionKilled(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	w1 := openWriter(t, url, testDigest, "op-1")
	terminate(t, observer, w1.Session().PID)

	w2 := openWriter(t, url, testDigest, "op-2")
	if l := mustLease(t, observer, testDigest); l.Holder != "op-2" || !l.Writer.Same(w2.Session()) {
		t.Fatalf("lease after takeover = %+v, want op-2 held by %v", l, w2.Session())
	}
	// The dead writer's release fails (its session is gone) and the owed
	// release completed from elsewhere does not touch the new holder's row.
	if err := w1.Release(ctx); !errors.Is(err, ErrWriterClosed) && !IsConnectionLost(err) {
		t.Errorf("Release of a killed writer = %v, want a closed-session error", err)
	}
	if err := ReleaseLease(ctx, observer, testDigest, "op-1"); err != nil {
		t.Fatal(err)
	}
	if l := mustLease(t, observer, testDigest); l.Holder != "op-2" {
		t.Fatalf("ReleaseLease of the old holder removed the new holder's lease: %+v", l)
	}
}

// TestLeaseTakeoverRule pins down when a recorded holder may be taken
// over. The advisory lock decides first: a session holding it is a live
// writer, refused even past its deadline (the server ends an idle writer
// at its deadline, which frees the lock: see
// TestWriterIsEndedByTheServerAtItsDeadline). With the lock free, the row
// is taken over when its session is gone or its deadline has passed.
func TestLeaseTakeoverRule(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		lockHeld     bool // the recorded session holds the advisory lock
		sessionAlive bool
		deadlinePast bool
		takeover     bool
	}{
		{"lock held, deadline ahead", true, true, false, false},
		{"lock held, deadline passed", true, true, true, false},
		{"lock free, session alive, deadline ahead", false, true, false, false},
		{"lock free, session alive, deadline passed", false, true, true, true},
		{"lock free, session gone, deadline ahead", false, false, false, true},
		{"lock free, session gone, deadline passed", false, false, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDB(t)
			ctx := testCtx(t)
			holder := dial(t, url)
			if err := ensureRuntimeSchema(ctx, holder); err != nil {
				t.Fatal(err)
			}
			s, err := currentSession(ctx, holder)
			if err != nil {
				t.Fatal(err)
			}
			if !c.sessionAlive {
				s.BackendStart = s.BackendStart.Add(-time.Hour) // an earlier session with the same pid
			}
			if c.lockHeld {
				if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", AdvisoryLockKey(testDigest)); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Hour)
			if c.deadlinePast {
				deadline = time.Now().Add(-time.Minute)
			}
			_, err = holder.Exec(ctx, `INSERT INTO ptah.leases VALUES ($1, 'op-old', 'PtahSchema/default/app', $2, $3, $4, now())`,
				testDigest, s.PID, s.BackendStart, deadline)
			if err != nil {
				t.Fatal(err)
			}

			w, err := OpenWriter(ctx, url, testDigest, "op-new", "", time.Now().Add(time.Hour))
			if c.takeover {
				if err != nil {
					t.Fatalf("OpenWriter = %v, want a takeover", err)
				}
				defer w.Release(ctx)
				if l := mustLease(t, holder, testDigest); l.Holder != "op-new" {
					t.Fatalf("lease = %+v, want op-new", l)
				}
				return
			}
			wantHeld(t, err, "op-old")
			if l := mustLease(t, holder, testDigest); l.Holder != "op-old" {
				t.Fatalf("lease after a refusal = %+v, want op-old untouched", l)
			}
		})
	}
}

// TestWriterIsEndedByTheServerAtItsDeadline: a writer idling past its
// deadline (a hung process) is ended by the server, so the database is not
// held by a session that may no longer write anyway.
func TestWriterIsEndedByTheServerAtItsDeadline(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)
	now, err := ServerNow(ctx, observer)
	if err != nil {
		t.Fatal(err)
	}
	deadline := now.Add(1500 * time.Millisecond)
	w1, err := OpenWriter(ctx, url, testDigest, "op-1", "", deadline)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Release(ctx)

	// Wait for the server to end the idle session (the test's own bound is
	// generous: a loaded machine may be slow to get there).
	for {
		alive, err := SessionAlive(ctx, observer, w1.Session().PID, w1.Session().BackendStart)
		if err != nil {
			t.Fatal(err)
		}
		if !alive {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the writer session is still alive long after its deadline")
		case <-time.After(50 * time.Millisecond):
		}
	}
	// It was the deadline, on the server's clock, that ended it.
	if gone, err := ServerNow(ctx, observer); err != nil || gone.Before(deadline) {
		t.Fatalf("the writer session ended at %v, before its deadline %v (%v)", gone, deadline, err)
	}
	err = w1.Execute(ctx, "plan-1", &Plan{Statements: []Statement{{SQL: "CREATE TABLE public.late (id int)"}}}, nil)
	if !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Execute past the deadline = %v, want ErrNotStarted", err)
	}
	openWriter(t, url, testDigest, "op-2")
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	observer := dial(t, url)

	// Nothing ever written: no lease, and releasing is a no-op.
	if l := mustLease(t, observer, testDigest); l != nil {
		t.Fatalf("lease in a fresh database = %+v", l)
	}
	if err := ReleaseLease(ctx, observer, testDigest, "op-1"); err != nil {
		t.Fatalf("ReleaseLease in a fresh database = %v", err)
	}

	w := openWriter(t, url, testDigest, "op-1")
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("second Release = %v", err)
	}
	if l := mustLease(t, observer, testDigest); l != nil {
		t.Fatalf("lease after Release = %+v", l)
	}
	if pid := advisoryHolder(t, observer, testDigest); pid != 0 {
		t.Fatalf("advisory lock still held by pid %d after Release", pid)
	}
	for range 2 {
		if err := ReleaseLease(ctx, observer, testDigest, "op-1"); err != nil {
			t.Fatalf("ReleaseLease of a released lease = %v", err)
		}
	}

	// ReleaseLease deletes only its own holder's row.
	openWriter(t, url, testDigest, "op-2")
	if err := ReleaseLease(ctx, observer, testDigest, "op-1"); err != nil {
		t.Fatal(err)
	}
	if l := mustLease(t, observer, testDigest); l == nil || l.Holder != "op-2" {
		t.Fatalf("lease = %+v, want op-2 untouched", l)
	}
	if err := ReleaseLease(ctx, observer, testDigest, "op-2"); err != nil {
		t.Fatal(err)
	}
	if l := mustLease(t, observer, testDigest); l != nil {
		t.Fatalf("lease after the owed release = %+v", l)
	}
}

// TestOpenWriterConcurrently: eight writers racing for one database on its
// first use; exactly one gets it and every other names the winner.
func TestOpenWriterConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	const n = 8
	writers := make([]*Writer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			writers[i], errs[i] = OpenWriter(ctx, url, testDigest, fmt.Sprintf("op-%d", i), "", time.Now().Add(time.Hour))
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, w := range writers {
		if w == nil {
			continue
		}
		defer w.Release(ctx)
		if winner >= 0 {
			t.Fatalf("writers %d and %d both took the database", winner, i)
		}
		winner = i
	}
	if winner < 0 {
		t.Fatalf("no writer took the database: %v", errors.Join(errs...))
	}
	for i, err := range errs {
		if i != winner {
			wantHeld(t, err, fmt.Sprintf("op-%d", winner))
		}
	}
}
