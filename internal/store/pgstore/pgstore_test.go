package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/pgstore"
	"github.com/ptah-run/ptah/internal/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := pgstore.New(context.Background(), newPool(t, pgtest.NewDB(t)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func newPool(t *testing.T, u string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func object(name string) store.Object {
	return store.Object{Kind: "PtahSchema", Namespace: "default", Name: name, ContractVersion: 1, Spec: json.RawMessage(`{}`)}
}

// Several ptah processes started at once on a fresh database all get a
// working store, and the tables are created once.
func TestConcurrentFirstUseCreatesTheTablesOnce(t *testing.T) {
	t.Parallel()
	u := pgtest.NewDB(t)
	const processes = 8
	conns := make([]*pgx.Conn, processes)
	for i := range conns {
		conns[i] = connect(t, u) // one session each, like separate processes
	}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, processes)
	)
	for i, conn := range conns {
		wg.Go(func() {
			<-start
			s, err := pgstore.New(context.Background(), conn)
			if err == nil {
				_, err = s.Create(context.Background(), object(fmt.Sprint("from-", i)))
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d: %v", i, err)
		}
	}
	var versions, objects int
	err := conns[0].QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM ptah.schema_version), (SELECT count(*) FROM ptah.objects)`).Scan(&versions, &objects)
	if err != nil || versions != 1 || objects != processes {
		t.Fatalf("schema_version rows %d, objects %d (%v); want 1 and %d", versions, objects, err, processes)
	}
}

func TestNewRefusesANewerLayout(t *testing.T) {
	t.Parallel()
	u := pgtest.NewDB(t)
	pool := newPool(t, u)
	if _, err := pgstore.New(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, u, `UPDATE ptah.schema_version SET version = version + 1 WHERE component = 'objects'`)
	_, err := pgstore.New(context.Background(), pool)
	if !errors.Is(err, pgstore.ErrNewerLayout) {
		t.Fatalf("New on a newer layout: %v, want ErrNewerLayout", err)
	}
}

// A newer ptah may have dropped or renamed this layout's tables; an older
// one must not bring them back.
func TestNewDoesNotRecreateTablesOfANewerLayout(t *testing.T) {
	t.Parallel()
	u := pgtest.NewDB(t)
	pool := newPool(t, u)
	if _, err := pgstore.New(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, u, `UPDATE ptah.schema_version SET version = 99; ALTER TABLE ptah.objects RENAME TO objects_v99`)
	if _, err := pgstore.New(context.Background(), pool); !errors.Is(err, pgstore.ErrNewerLayout) {
		t.Fatalf("New: %v, want ErrNewerLayout", err)
	}
	var recreated bool
	if err := pool.QueryRow(context.Background(), `SELECT to_regclass('ptah.objects') IS NOT NULL`).Scan(&recreated); err != nil || recreated {
		t.Fatalf("ptah.objects recreated: %v %v", recreated, err)
	}
}

var roleCounter atomic.Int64

// newRole creates a login role that may connect to every database and
// create nothing, and returns its name. It is dropped after the test's
// databases, which hold its grants.
func newRole(t *testing.T) string {
	t.Helper()
	base := pgtest.BaseURL(t)
	role := fmt.Sprintf("ptah_reader_%d_%d", os.Getpid(), roleCounter.Add(1))
	pgtest.Exec(t, base, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { pgtest.Exec(t, base, "DROP ROLE IF EXISTS "+role) })
	return role
}

func asRole(t *testing.T, u, role string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	parsed.User = url.User(role)
	return parsed.String()
}

// Reading verbs (ptah status) may run as a role that can read the store but
// create nothing: once the tables exist, New only reads.
func TestExistingStoreNeedsNoCreatePrivilege(t *testing.T) {
	t.Parallel()
	role := newRole(t)
	u := pgtest.NewDB(t)
	ctx := context.Background()
	owner, err := pgstore.New(ctx, newPool(t, u))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Create(ctx, object("a")); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, u, "GRANT USAGE ON SCHEMA ptah TO "+role+"; GRANT SELECT ON ALL TABLES IN SCHEMA ptah TO "+role)

	reader, err := pgstore.New(ctx, connect(t, asRole(t, u, role)))
	if err != nil {
		t.Fatalf("New as a read-only role: %v", err)
	}
	list, err := reader.List(ctx, store.ListOptions{})
	if err != nil || len(list) != 1 {
		t.Fatalf("List as a read-only role: %d objects, %v", len(list), err)
	}

	// On a fresh database the same role cannot create the store, and says so.
	_, err = pgstore.New(ctx, connect(t, asRole(t, pgtest.NewDB(t), role)))
	if err == nil {
		t.Fatal("a role without CREATE created the ptah schema")
	}
	t.Logf("as expected: %v", err)
}

// internal/postgres connects with search_path set to pg_catalog only; the
// store must not depend on the search path.
func TestStoreOnAConnWithoutSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = "pg_catalog"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s, err := pgstore.New(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	created, err := s.Create(ctx, object("a"))
	if err != nil {
		t.Fatal(err)
	}
	created.Spec = json.RawMessage(`{"v": 1}`)
	if _, err := s.Update(ctx, created); err != nil {
		t.Fatal(err)
	}
}

// With a pgx.Tx the store's writes commit or roll back with the caller's.
func TestStoreInACallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, pgtest.NewDB(t))
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inTx, err := pgstore.New(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inTx.Create(ctx, object("a")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('ptah.objects') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("after rollback ptah.objects exists=%v (%v)", exists, err)
	}
}

// JSON that is valid but that jsonb will not store is the caller's error,
// classified like every other invalid object.
func TestValuesPostgreSQLRefusesAreInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := pgstore.New(ctx, newPool(t, pgtest.NewDB(t)))
	if err != nil {
		t.Fatal(err)
	}
	o := object("a")
	o.Spec = json.RawMessage(`{"s": "nul \u0000 inside"}`)
	if _, err := s.Create(ctx, o); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Create with a NUL in a string: %v, want ErrInvalid", err)
	}
}

// The store and the runtime tables serialize their creation on one lock.
func TestSchemaLockKeyIsTheEngines(t *testing.T) {
	if pgstore.SchemaLockKey != postgres.SchemaLockKey {
		t.Fatalf("pgstore takes lock %#x, internal/postgres %#x", pgstore.SchemaLockKey, postgres.SchemaLockKey)
	}
}

// Open is for the verbs that only read: it creates nothing, says so when
// ptah recorded nothing, and refuses a newer layout like New.
func TestOpenCreatesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, pgtest.NewDB(t))
	if _, err := pgstore.Open(ctx, pool); !errors.Is(err, pgstore.ErrNoStore) {
		t.Fatalf("Open of a fresh database = %v, want ErrNoStore", err)
	}
	var absent bool
	if err := pool.QueryRow(ctx, `SELECT to_regnamespace('ptah') IS NULL`).Scan(&absent); err != nil || !absent {
		t.Fatalf("Open created the ptah schema (absent %v, %v)", absent, err)
	}
	created, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := created.Create(ctx, object("a")); err != nil {
		t.Fatal(err)
	}
	opened, err := pgstore.Open(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opened.Get(ctx, "PtahSchema", "default", "a"); err != nil {
		t.Fatalf("Open reads what New wrote: %v", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE ptah.schema_version SET version = version + 1 WHERE component = 'objects'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.Open(ctx, pool); !errors.Is(err, pgstore.ErrNewerLayout) {
		t.Fatalf("Open of a newer layout = %v, want ErrNewerLayout", err)
	}
}
