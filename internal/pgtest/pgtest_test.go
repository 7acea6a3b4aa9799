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
