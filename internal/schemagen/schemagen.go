// Package schemagen writes large declared schemas for tests and
// benchmarks: the shape of a big application schema, in as many tables as
// asked, spread over files the way a project would keep them.
//
// Every table has 9 columns (an identity-free bigint key, a reference to
// the previous table, text, varchar, numeric, boolean, timestamptz and
// jsonb columns, with defaults and NOT NULLs), a primary key, 3 indexes
// (one unique) and a foreign key to the previous table (the first to
// itself). Some tables get a view over them and their parent, and some a
// function: in PL/pgSQL, or in SQL with a BEGIN ATOMIC body.
package schemagen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Shape says how big a schema to write.
type Shape struct {
	// Tables is the number of tables.
	Tables int
	// ViewEvery and FunctionEvery give every n-th table a view and a
	// function; 0 gives none.
	ViewEvery, FunctionEvery int
	// TablesPerFile splits the tables over files (default 500).
	TablesPerFile int
	// ExtraColumnEvery gives every n-th table (from the first) a tenth
	// column, "extra integer": the same schema, changed in 1 table of n.
	ExtraColumnEvery int
}

// Default is the shape of the scale tests: n tables, a view for every
// 10th, a function for every 20th.
func Default(n int) Shape { return Shape{Tables: n, ViewEvery: 10, FunctionEvery: 20} }

// File is one declared SQL file.
type File struct {
	Name string // e.g. "0001_tables.sql"
	SQL  string
}

// Files writes the schema as files, to be loaded in name order: the
// tables, indexes and keys in files of TablesPerFile tables, then the
// views and functions in a file of their own.
func (s Shape) Files() []File {
	per := s.TablesPerFile
	if per <= 0 {
		per = 500
	}
	var files []File
	for from := 0; from < s.Tables; from += per {
		var b strings.Builder
		fmt.Fprintf(&b, "-- Tables %d to %d.\n", from, min(from+per, s.Tables)-1)
		for i := from; i < min(from+per, s.Tables); i++ {
			writeTable(&b, i, s.ExtraColumnEvery > 0 && i%s.ExtraColumnEvery == 0)
		}
		files = append(files, File{Name: fmt.Sprintf("%04d_tables.sql", len(files)+1), SQL: b.String()})
	}
	var b strings.Builder
	for i := 0; i < s.Tables; i++ {
		if s.ViewEvery > 0 && i%s.ViewEvery == 0 {
			writeView(&b, i)
		}
		if s.FunctionEvery > 0 && i%s.FunctionEvery == 0 {
			writeFunction(&b, i, i/s.FunctionEvery%2 == 0)
		}
	}
	if b.Len() > 0 {
		files = append(files, File{Name: fmt.Sprintf("%04d_views_and_functions.sql", len(files)+1), SQL: b.String()})
	}
	return files
}

// SQL is the whole schema as one script.
func (s Shape) SQL() string {
	var b strings.Builder
	for _, f := range s.Files() {
		b.WriteString(f.SQL)
	}
	return b.String()
}

// WriteDir writes the files into dir, which must exist.
func (s Shape) WriteDir(dir string) error {
	for _, f := range s.Files() {
		if err := os.WriteFile(filepath.Join(dir, f.Name), []byte(f.SQL), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Table names table i.
func Table(i int) string { return fmt.Sprintf("t%05d", i) }

func writeTable(b *strings.Builder, i int, extra bool) {
	t, parent := Table(i), Table(max(i-1, 0))
	note := "note text,"
	if extra {
		note += "\n    extra integer,"
	}
	fmt.Fprintf(b, `
CREATE TABLE %[1]s (
    id bigint NOT NULL,
    parent_id bigint,
    name text NOT NULL,
    email varchar(200),
    amount numeric(12,2) NOT NULL DEFAULT 0,
    active boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb,
    %[3]s
    CONSTRAINT %[1]s_pkey PRIMARY KEY (id),
    CONSTRAINT %[1]s_parent_fkey FOREIGN KEY (parent_id) REFERENCES %[2]s (id)
);
CREATE INDEX %[1]s_parent_idx ON %[1]s (parent_id);
CREATE INDEX %[1]s_name_created_idx ON %[1]s (name, created_at DESC) WHERE active;
CREATE UNIQUE INDEX %[1]s_email_key ON %[1]s (lower(email));
`, t, parent, note)
}

func writeView(b *strings.Builder, i int) {
	t, parent := Table(i), Table(max(i-1, 0))
	fmt.Fprintf(b, `
CREATE VIEW %[1]s_with_parent AS
    SELECT c.id, c.name, c.amount, p.name AS parent_name -- a comment; with a semicolon
    FROM %[1]s c LEFT JOIN %[2]s p ON p.id = c.parent_id
    WHERE c.active;
`, t, parent)
}

func writeFunction(b *strings.Builder, i int, plpgsql bool) {
	t := Table(i)
	if plpgsql {
		fmt.Fprintf(b, `
CREATE FUNCTION %[1]s_touch(p_id bigint) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE %[1]s SET note = 'touched; at ' || now() WHERE id = p_id;
END;
$fn$;
`, t)
		return
	}
	fmt.Fprintf(b, `
CREATE FUNCTION %[1]s_total(p_active boolean) RETURNS numeric LANGUAGE sql
BEGIN ATOMIC
    SELECT coalesce(sum(amount), 0) FROM %[1]s WHERE active = p_active;
END;
`, t)
}
