// Package pgtest gives every test its own fresh database on a real
// PostgreSQL server: a throwaway server this package starts once per test
// binary, or the server PTAH_TEST_DATABASE_URL points at.
//
// A package that uses it calls pgtest.Main from its TestMain, so the server
// it started is stopped when the tests end.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/pgserver"
)

// EnvURL names the variable that points the tests at an existing server.
const EnvURL = "PTAH_TEST_DATABASE_URL"

var (
	once    sync.Once
	server  *pgserver.Server
	baseURL string // a URL whose database part is replaced per test
	initErr error
	counter atomic.Int64
	// admins holds, per maintenance database URL, idle connections reused
	// to create and drop the tests' databases: a connection costs the
	// server a process, which is a good part of what a small test costs it.
	// (Per URL: a test may start a server of its own, see NewServer.)
	adminsMu sync.Mutex
	admins   = map[string]chan *pgx.Conn{}
)

// adminPool is the pool of idle admin connections to base.
func adminPool(base string) chan *pgx.Conn {
	adminsMu.Lock()
	defer adminsMu.Unlock()
	pool, ok := admins[base]
	if !ok {
		pool = make(chan *pgx.Conn, 8)
		admins[base] = pool
	}
	return pool
}

// closeAdmins closes the idle admin connections to base.
func closeAdmins(base string) {
	pool := adminPool(base)
	for {
		select {
		case conn := <-pool:
			conn.Close(context.Background())
		default:
			return
		}
	}
}

// Main runs the tests, then the after functions, and stops the server they
// started, if any.
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	adminsMu.Lock()
	bases := make([]string, 0, len(admins))
	for base := range admins {
		bases = append(bases, base)
	}
	adminsMu.Unlock()
	for _, base := range bases {
		closeAdmins(base)
	}
	if server != nil {
		if err := server.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stopping server:", err)
		}
	}
	os.Exit(code)
}

func setup() {
	if u := os.Getenv(EnvURL); u != "" {
		baseURL = u
		return
	}
	server, initErr = pgserver.Start()
	if initErr != nil {
		initErr = fmt.Errorf("starting a throwaway PostgreSQL for the tests: %w", initErr)
		return
	}
	baseURL = server.URL("postgres")
}

// BaseURL returns the URL of the server's maintenance database, starting
// the server if needed. The test fails if no server can be had.
func BaseURL(t testing.TB) string {
	t.Helper()
	once.Do(setup)
	if initErr != nil {
		t.Fatal(initErr)
	}
	return baseURL
}

// NewServer starts a throwaway server for this test alone, with opts (for
// settings the shared server does not have, such as
// pgserver.StockLimits()), and returns the URL of its maintenance
// database. The server is stopped when the test ends. Without server
// binaries the test is skipped if PTAH_TEST_DATABASE_URL is set (that
// server's settings are not the test's to choose), and fails otherwise.
func NewServer(t testing.TB, opts ...pgserver.Option) string {
	t.Helper()
	srv, err := pgserver.Start(opts...)
	if errors.Is(err, pgserver.ErrNoBinaries) && os.Getenv(EnvURL) != "" {
		t.Skipf("this test starts a server of its own, with settings of its own: %v", err)
	}
	if err != nil {
		t.Fatalf("starting a throwaway PostgreSQL for %s: %v", t.Name(), err)
	}
	base := srv.URL("postgres")
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Logf("stopping the server: %v", err)
		}
	})
	t.Cleanup(func() { closeAdmins(base) }) // runs first
	return base
}

// NewDB creates a fresh, empty database (from template0) for this test and
// returns its URL. The database is dropped when the test ends.
func NewDB(t testing.TB) string {
	t.Helper()
	return NewDBOn(t, BaseURL(t))
}

// NewDBOn is NewDB on the server whose maintenance database is at base
// (see NewServer).
func NewDBOn(t testing.TB, base string) string {
	t.Helper()
	name := fmt.Sprintf("ptahtest_%d_%d", os.Getpid(), counter.Add(1))
	if err := admin(base, "CREATE DATABASE "+name+" TEMPLATE template0"); err != nil {
		t.Fatalf("creating the test's database: %v", err)
	}
	t.Cleanup(func() {
		if err := admin(base, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("dropping %s: %v", name, err)
		}
	})
	return WithDatabase(t, base, name)
}

// admin runs sql on an idle connection to the maintenance database at
// base, or a new one, and keeps the connection for the next caller.
func admin(base, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := adminPool(base)
	var conn *pgx.Conn
	select {
	case conn = <-pool:
	default:
		var err error
		if conn, err = pgx.Connect(ctx, base); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		conn.Close(context.Background())
		return err
	}
	select {
	case pool <- conn:
	default:
		conn.Close(ctx)
	}
	return nil
}

// WithDatabase returns u with its database replaced by db.
func WithDatabase(t testing.TB, u, db string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil || !strings.HasPrefix(parsed.Scheme, "postgres") {
		t.Fatalf("%s must be a postgres:// URL", EnvURL)
	}
	parsed.Path = "/" + db
	return parsed.String()
}

// Exec runs sql (one or more statements) on the database at u.
func Exec(t testing.TB, u, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("executing %q: %v", abbreviate(sql), err)
	}
}

func abbreviate(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
