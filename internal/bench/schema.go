package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/postgres/script"
	"github.com/ptah-run/ptah/internal/schemagen"
)

// urlVar is the environment variable the benchmark's ptah.yaml files name:
// the URL is never on a command line.
const urlVar = "BENCH_DATABASE_URL"

// Schema is a database built from a generated schema of some size, with
// its declaration beside it, unchanged and changed in 1% of its tables.
type Schema struct {
	Tables int
	DB     string // the database, at the declared state
	// Same and Changed are ptah.yaml files declaring the schema as the
	// database has it, and with a column added to 1 table in 100.
	Same, Changed string
}

// Schema returns the database of n tables, building it on first use.
func (e *Env) Schema(ctx context.Context, n int) (*Schema, error) {
	if e.schemas == nil {
		e.schemas = map[int]*Schema{}
	}
	if s, ok := e.schemas[n]; ok {
		return s, nil
	}
	s := &Schema{Tables: n, DB: fmt.Sprintf("schema_%d", n)}
	shape := schemagen.Default(n)
	e.Logf("building %s: %s tables", s.DB, Count(n))
	if err := e.CreateDB(ctx, s.DB, "template0"); err != nil {
		return nil, err
	}
	if err := e.Load(ctx, s.DB, shape.SQL()); err != nil {
		return nil, err
	}
	changed := shape
	changed.ExtraColumnEvery = 100
	var err error
	if s.Same, err = e.declare(fmt.Sprintf("same_%d", n), shape, "OnApproval"); err != nil {
		return nil, err
	}
	if s.Changed, err = e.declare(fmt.Sprintf("changed_%d", n), changed, "OnApproval"); err != nil {
		return nil, err
	}
	e.schemas[n] = s
	return s, nil
}

// declare writes shape's files and a ptah.yaml declaring them into a
// directory of the work area, and returns the ptah.yaml's path.
func (e *Env) declare(name string, shape schemagen.Shape, apply string) (string, error) {
	dir := filepath.Join(e.Work, name)
	if err := os.MkdirAll(filepath.Join(dir, "schema"), 0o755); err != nil {
		return "", err
	}
	if err := shape.WriteDir(filepath.Join(dir, "schema")); err != nil {
		return "", err
	}
	yaml := fmt.Sprintf(`apiVersion: ptah.run/v1alpha1
kind: PtahSchema
metadata:
  name: bench
spec:
  target:
    urlFrom: {env: %s}
  source:
    path: ./schema
  schemas: [public]
  policy:
    apply: %s
    lockTimeout: 30s
`, urlVar, apply)
	path := filepath.Join(dir, "ptah.yaml")
	return path, os.WriteFile(path, []byte(yaml), 0o644)
}

// admin connects to the server's maintenance database.
func (e *Env) admin(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, e.Server.URL("postgres"))
}

// CreateDB (re)creates database name as a copy of template.
func (e *Env) CreateDB(ctx context.Context, name, template string) error {
	conn, err := e.admin(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
	return err
}

// DropDB drops database name.
func (e *Env) DropDB(ctx context.Context, name string) error {
	conn, err := e.admin(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// Load runs sql in database db, a statement at a time.
func (e *Env) Load(ctx context.Context, db, sql string) error {
	stmts, err := script.Split(sql)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, e.Server.URL(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, st := range stmts {
		if _, err := conn.Exec(ctx, st.SQL); err != nil {
			return fmt.Errorf("loading %s: %w", db, err)
		}
	}
	return nil
}

// Ptah is a ptah command on database db.
func (e *Env) PtahCmd(ctx context.Context, db string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.Ptah, args...)
	cmd.Env = Environ(urlVar+"="+e.Server.URL(db), "NO_COLOR=1")
	return cmd
}

// Tool finds one of the server's client programs (pg_dump, psql): beside
// the server's binaries, else on PATH, else the newest Debian install.
func (e *Env) Tool(name string) (string, error) {
	if p := filepath.Join(e.Server.BinDir, name); fileExists(p) {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(dirs) > 0 {
		return dirs[len(dirs)-1], nil
	}
	return "", fmt.Errorf("%s not found beside %s, on PATH, or under /usr/lib/postgresql", name, e.Server.BinDir)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// PgDump is pg_dump --schema-only of database db.
func (e *Env) PgDump(ctx context.Context, db string) (*exec.Cmd, error) {
	dump, err := e.Tool("pg_dump")
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, dump, "--schema-only", "-f", os.DevNull, "-d", e.Server.URL(db)), nil
}
