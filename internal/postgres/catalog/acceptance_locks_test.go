package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
)

// The locks each statement of a plan says it takes (Statement.Locks) are
// checked against the locks PostgreSQL takes. A probe database is built
// as the target was before the plan; each statement of a transactional
// phase then runs alone in a transaction, and pg_locks is read in that
// transaction before it commits: relation locks last until the end of the
// transaction, so the reading holds every lock the statement took. The
// relations that count are those that existed before the plan (by OID: a
// table dropped and created again is a new one), other than system
// catalogs, TOAST tables and composite types; the modes that count are
// those stronger than ROW EXCLUSIVE. A statement PostgreSQL refuses in a
// transaction block (CREATE INDEX CONCURRENTLY) cannot be held open that
// way: a session with an open snapshot, reading the tables it locks, makes
// it wait part way, and a watcher reads its locks until it ends. What the watcher saw must be declared, at a mode
// at least as strong; a lock it may have missed (taken for an instant at
// the very end) is not held against the plan.

// probeLocks runs plan's statements one at a time on a new database built
// as the case's target was, and returns, statement by statement, what
// each locked.
func probeLocks(ctx context.Context, t *testing.T, c acceptanceCase, plan *postgres.Plan) []probed {
	t.Helper()
	url := pgtest.NewDB(t)
	conn := connect(ctx, t, url)
	defer conn.Close(context.Background())
	execFile(ctx, t, conn, "setup.sql", c.Setup)
	execFile(ctx, t, conn, "old.sql", c.Old)
	before := relations{}
	rows, err := conn.Query(ctx, `SELECT c.oid, quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'i', 'I', 'f')
		AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var oid uint32
		var name string
		if err := rows.Scan(&oid, &name); err != nil {
			t.Fatal(err)
		}
		before[oid] = name
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Converting a timestamp column to timestamptz rewrites the table
	// unless the session's TimeZone is UTC; the plan declares what it may
	// lock under any, so the probe runs where it rewrites.
	for _, set := range append(plan.Preamble(), "SET TimeZone = 'America/New_York'") {
		if _, err := conn.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]probed, len(plan.Statements))
	for i, s := range plan.Statements {
		locks, err := heldLocks(ctx, conn, s.SQL, before)
		if pgErr := (*pgconn.PgError)(nil); s.NoTransaction && errors.As(err, &pgErr) && pgErr.Code == "25001" {
			// It cannot run in a transaction block.
			out[i].watched = true
			locks, err = watchLocks(ctx, url, conn, s, before)
		}
		if err != nil {
			t.Fatalf("probing the locks of statement %d (%s): %v", i+1, s.SQL, err)
		}
		out[i].locks = locks
	}
	return out
}

// probed is what the probe saw one statement lock; watched when it ran
// outside a transaction, seen by a watcher, which may miss a lock taken
// for an instant.
type probed struct {
	locks   []postgres.Lock
	watched bool
}

// locksQuery reads the relation locks stronger than ROW EXCLUSIVE that
// session $1 holds (or waits for) on relations whose OIDs are in $2. They
// are named by the OID, as the relation was named before the plan: a
// statement that drops or renames one holds its lock, but its own
// transaction no longer sees the old name.
const locksQuery = `SELECT l.relation::oid, l.mode
	FROM pg_locks l
	WHERE l.pid = $1 AND l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.relation = ANY($2)
	AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', 'RowExclusiveLock')`

// relations are the relations that existed before the plan, by OID, with
// their names then.
type relations map[uint32]string

func (r relations) oids() []uint32 {
	out := make([]uint32, 0, len(r))
	for oid := range r {
		out = append(out, oid)
	}
	return out
}

// heldLocks runs sql in a transaction of its own and reads, before the
// commit, the locks it took.
func heldLocks(ctx context.Context, conn *pgx.Conn, sql string, before relations) ([]postgres.Lock, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, sql); err != nil {
		return nil, err
	}
	locks, err := readLocks(ctx, tx.Conn(), int(conn.PgConn().PID()), before, nil)
	if err != nil {
		return nil, err
	}
	return locks, tx.Commit(ctx)
}

// readLocks adds to into what pid holds, the strongest mode per relation.
func readLocks(ctx context.Context, q *pgx.Conn, pid int, before relations, into []postgres.Lock) ([]postgres.Lock, error) {
	rows, err := q.Query(ctx, locksQuery, pid, before.oids())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var oid uint32
		var mode string
		if err := rows.Scan(&oid, &mode); err != nil {
			return nil, err
		}
		rel := before[oid]
		m, ok := postgres.ParseLockMode(mode)
		if !ok {
			return nil, fmt.Errorf("pg_locks names a mode %q", mode)
		}
		into = mergeLock(into, postgres.Lock{Relation: rel, Mode: m})
	}
	return into, rows.Err()
}

func mergeLock(into []postgres.Lock, l postgres.Lock) []postgres.Lock {
	for i := range into {
		if into[i].Relation == l.Relation {
			into[i].Mode = max(into[i].Mode, l.Mode)
			return into
		}
	}
	return append(into, l)
}

// watchLocks runs sql, which cannot run in a transaction block, on conn
// while a watcher session reads conn's locks, until it ends. A third
// session holds a snapshot open meanwhile, so that a concurrent build or
// drop, which waits for older snapshots, waits part way with its locks
// taken; the watcher lets it go once it has seen it wait.
func watchLocks(ctx context.Context, url string, conn *pgx.Conn, s postgres.Statement, before relations) ([]postgres.Lock, error) {
	sql := s.SQL
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer holder.Close(context.Background())
	watcher, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer watcher.Close(context.Background())
	if _, err := holder.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class"); err != nil {
		return nil, err
	}
	// The holder also reads the tables the statement says it locks: a
	// concurrent drop waits for their readers.
	for _, l := range s.Locks {
		var kind string
		if err := holder.QueryRow(ctx, "SELECT coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)), '')", l.Relation).Scan(&kind); err != nil {
			return nil, err
		}
		if kind == "r" || kind == "p" || kind == "m" {
			if _, err := holder.Exec(ctx, "SELECT FROM "+l.Relation+" LIMIT 0"); err != nil {
				return nil, err
			}
		}
	}
	pid := int(conn.PgConn().PID())
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, sql)
		done <- err
	}()
	var (
		seen     []postgres.Lock
		released bool
		mu       sync.Mutex
	)
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		if !released {
			released = true
			_, _ = holder.Exec(context.Background(), "COMMIT")
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case err := <-done:
			release()
			return seen, err
		default:
		}
		if seen, err = readLocks(ctx, watcher, pid, before, seen); err != nil {
			release()
			<-done
			return nil, err
		}
		var waiting bool
		if err := watcher.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND NOT granted)`, pid).Scan(&waiting); err != nil {
			release()
			<-done
			return nil, err
		}
		if waiting || time.Now().After(deadline) {
			// Read once more while it waits, then let it go.
			if seen, err = readLocks(ctx, watcher, pid, before, seen); err != nil {
				release()
				<-done
				return nil, err
			}
			release()
		}
		time.Sleep(time.Millisecond)
	}
}

// checkLocks compares what each statement declares it locks with what the
// probe saw it lock.
func checkLocks(t *testing.T, plan *postgres.Plan, seen []probed) {
	t.Helper()
	for i, s := range plan.Statements {
		declared := sortedLocks(s.Locks)
		got := sortedLocks(seen[i].locks)
		if os.Getenv("PTAH_TEST_LOCKS_LOG") != "" {
			t.Logf("LOCKS %s | declared %s | took %s | %s", t.Name(), fmtLocks(declared), fmtLocks(got), oneLine(s.SQL))
		}
		if seen[i].watched {
			for _, g := range got {
				j := slices.IndexFunc(declared, func(d postgres.Lock) bool { return d.Relation == g.Relation })
				if j < 0 || declared[j].Mode < g.Mode {
					t.Errorf("statement %d takes %s, which it does not declare (it declares %s):\n%s", i+1, g, fmtLocks(declared), s.SQL)
				}
			}
			continue
		}
		if !slices.Equal(declared, got) {
			t.Errorf("statement %d declares the locks %s; PostgreSQL took %s:\n%s", i+1, fmtLocks(declared), fmtLocks(got), s.SQL)
		}
	}
}

func sortedLocks(l []postgres.Lock) []postgres.Lock {
	l = slices.Clone(l)
	slices.SortFunc(l, func(a, b postgres.Lock) int { return strings.Compare(a.Relation, b.Relation) })
	return l
}

func fmtLocks(l []postgres.Lock) string {
	if len(l) == 0 {
		return "{}"
	}
	s := make([]string, len(l))
	for i, x := range l {
		s[i] = x.String()
	}
	return "{" + strings.Join(s, ", ") + "}"
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
