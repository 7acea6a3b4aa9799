package catalog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/pgtest"
)

func loadCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestLoadDesiredRunsEachStatementOnItsOwn: a file is run statement by
// statement, so statements PostgreSQL refuses in a transaction block load
// too, and SQL-standard function bodies keep their semicolons.
func TestLoadDesiredRunsEachStatementOnItsOwn(t *testing.T) {
	t.Parallel()
	files := []SourceFile{{Name: "schema/001.sql", SQL: `
CREATE TABLE t (id int PRIMARY KEY, name text);
CREATE INDEX CONCURRENTLY t_name ON t (name);
VACUUM t;
CREATE FUNCTION n() RETURNS bigint LANGUAGE sql
BEGIN ATOMIC
  SELECT count(*) FROM t;
END;
`}}
	m, err := LoadDesired(loadCtx(t), pgtest.BaseURL(t), files, []string{"public"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tables) != 1 || len(m.Indexes) != 1 || len(m.Functions) != 1 {
		t.Fatalf("loaded %d tables, %d indexes, %d functions; want 1 of each", len(m.Tables), len(m.Indexes), len(m.Functions))
	}
	if def := m.Functions[0].Definition; !strings.Contains(def, "BEGIN ATOMIC") || !strings.Contains(def, "count(*)") {
		t.Errorf("function n = %s", def)
	}
}

// TestLoadErrorPointsIntoTheFile: an error is placed in the file: where
// PostgreSQL says, relative to the statement it was sent, or at the start
// of the statement when PostgreSQL gives no position.
func TestLoadErrorPointsIntoTheFile(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, sql    string
		line, column int
		message      string
	}{
		{"no position: the statement's start", "CREATE TABLE author (id int PRIMARY KEY);\n\n-- books\n  CREATE TABLE book (\n    author_id int REFERENCES authors\n  );\n",
			4, 3, `relation "authors" does not exist (SQLSTATE 42P01)`},
		{"PostgreSQL's position, in the statement", "CREATE TABLE a (id int);\nCREATE TABLE b (\n  id int,\n  x nosuchtype\n);",
			4, 5, `type "nosuchtype" does not exist`},
		{"characters, not bytes", "COMMENT ON SCHEMA public IS 'é';  CREATE TABLE café (x int, y nosuchtype);",
			1, 63, `type "nosuchtype" does not exist`}, // 65 in bytes
		{"a syntax error", "-- header\nCREATE TABLE ok (id int);\nCREAT TABLE posts (id int);", 3, 1, `syntax error at or near "CREAT"`},
		{"an unterminated string", "CREATE TABLE a (id int);\nCOMMENT ON TABLE a IS 'oops;\n", 2, 23, "unterminated quoted string"},
		{"a psql meta-command", "CREATE TABLE a (id int);\n\\connect other\nCREATE TABLE b (id int);", 2, 1, `psql meta-command \connect`},
		// Roles are not managed: PostgreSQL's error, and what to do.
		{"a grant to a role the server lacks", "CREATE TABLE a (id int);\nGRANT SELECT ON a TO ptah_test_nobody;", 2, 1,
			`role "ptah_test_nobody" does not exist (SQLSTATE 42704)` + "\nptah does not create roles: create it on the server"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadDesired(loadCtx(t), pgtest.BaseURL(t), []SourceFile{{Name: "schema/x.sql", SQL: tt.sql}}, []string{"public"})
			var le *LoadError
			if !errors.As(err, &le) || !errors.Is(err, ErrLoad) {
				t.Fatalf("LoadDesired = %v, want a *LoadError", err)
			}
			if le.File != "schema/x.sql" || le.Line != tt.line || le.Column != tt.column || !strings.Contains(le.Message, tt.message) {
				t.Errorf("LoadError = %s:%d:%d %q; want %d:%d %q", le.File, le.Line, le.Column, le.Message, tt.line, tt.column, tt.message)
			}
		})
	}
}

// TestLoadRefusesWhatActsOutsideTheDevDatabase: statements that would act
// on the server beyond the dev database are refused before they run.
func TestLoadRefusesWhatActsOutsideTheDevDatabase(t *testing.T) {
	t.Parallel()
	base := pgtest.BaseURL(t)
	for _, sql := range []string{
		"CREATE DATABASE ptah_declared_db",
		"drop database if exists ptah_declared_db",
		"ALTER DATABASE postgres SET work_mem = '1MB'",
		"ALTER SYSTEM SET work_mem = '1MB'",
		"CREATE TABLESPACE ts LOCATION '/tmp'",
		"COMMIT PREPARED 'x'",
	} {
		src := "CREATE TABLE a (id int);\n  " + sql + ";\n"
		_, err := LoadDesired(loadCtx(t), base, []SourceFile{{Name: "x.sql", SQL: src}}, []string{"public"})
		var le *LoadError
		if !errors.As(err, &le) || le.Line != 2 || le.Column != 3 || !strings.Contains(le.Message, "outside the database the declared files describe") {
			t.Errorf("loading %q: %v, want refused at 2:3", sql, err)
		}
	}
	conn, err := pgx.Connect(loadCtx(t), base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(loadCtx(t), "SELECT count(*) FROM pg_database WHERE datname = 'ptah_declared_db'").Scan(&n); err != nil || n != 0 {
		t.Errorf("the declared CREATE DATABASE ran (%d, %v)", n, err)
	}
}
