package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestNewDBIsFreshAndSeparate(t *testing.T) {
	t.Parallel()
	a, b := NewDB(t), NewDB(t)
	Exec(t, a, "CREATE TABLE only_in_a (id int); CREATE TABLE also_a (x int)")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname IN ('only_in_a','also_a')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database b sees %d tables created in a", n)
	}
}

// Creating and dropping the tests' databases reuses one connection to the
// maintenance database instead of starting a server process each time.
func TestNewDBReusesTheAdminConnection(t *testing.T) {
	pool := adminPool(BaseURL(t))
	pid := func() uint32 {
		t.Helper()
		select {
		case conn := <-pool:
			pool <- conn
			return conn.PgConn().PID()
		default:
			t.Fatal("no idle admin connection after NewDB")
			return 0
		}
	}
	t.Run("first", func(t *testing.T) { NewDB(t) })
	first := pid()
	t.Run("second", func(t *testing.T) { NewDB(t) })
	if again := pid(); again != first {
		t.Errorf("the second database was created and dropped on backend %d, the first on %d", again, first)
	}
}

// The admin connections are kept per server: a database made on a server
// a test started itself is made there, never on the shared one.
func TestNewDBOnMakesTheDatabaseOnThatServer(t *testing.T) {
	t.Run("shared", func(t *testing.T) { NewDB(t) }) // an idle admin connection to the shared server
	own := NewServer(t)
	u := NewDBOn(t, own)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connecting to the database made on the test's own server: %v", err)
	}
	conn.Close(ctx)
}
