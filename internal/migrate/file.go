package migrate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/ptah-run/ptah/internal/postgres/script"
)

// The first-line comments that make a file run outside a transaction. The
// second is goose's spelling, for files that come from it.
const (
	NoTransactionMarker    = "-- ptah:no-transaction"
	NoTransactionMarkerAlt = "-- +ptah no_transaction"
)

// load reads the file's contents and splits them, recording what is wrong.
func (f *File) load(fsys fs.FS, ps *problems) {
	data, err := fs.ReadFile(fsys, f.Path)
	if err != nil {
		ps.add(0, fmt.Errorf("reading: %w", err), f.Path)
		return
	}
	sum := sha256.Sum256(data)
	f.SQL = string(data)
	f.Checksum = checksumPrefix + hex.EncodeToString(sum[:])
	f.NoTransaction = noTransaction(f.SQL, f.Path, ps)
	stmts, err := script.Split(f.SQL)
	if err != nil {
		line := 0
		var se *script.Error
		if errors.As(err, &se) {
			line = se.Line
		}
		ps.add(line, fmt.Errorf("%w: %w", ErrBadSQL, err), f.Path)
		return
	}
	if len(stmts) == 0 {
		ps.add(0, fmt.Errorf("%w: the file holds only comments and white space; delete it, or put in it what it should run", ErrNoStatements), f.Path)
		return
	}
	f.Statements = stmts
	f.checkStatements(ps)
}

const checksumPrefix = "sha256:"

// noTransaction reads the file's directive. Only its first line may hold
// one; any other ptah directive, or one further down among the comments
// before the first statement, is an error rather than silently a file that
// runs in a transaction after all.
func noTransaction(sql, path string, ps *problems) bool {
	on := false
	for i, line := range strings.Split(sql, "\n") {
		if !isComment(line) {
			return on // the first statement: the directives' place is over
		}
		d, ok := directive(line)
		switch {
		case !ok:
		case i > 0:
			ps.add(i+1, fmt.Errorf("%w: %q: a directive must be the file's first line", ErrBadDirective, strings.TrimSpace(line)), path)
		case isNoTransaction(d):
			on = true
		default:
			ps.add(1, fmt.Errorf("%w: %q: the one directive is %q (or %q)", ErrBadDirective, strings.TrimSpace(line), NoTransactionMarker, NoTransactionMarkerAlt), path)
		}
	}
	return on
}

// directive returns what follows "--" on a line that is a ptah directive
// comment ("ptah:..." or "+ptah ..."), trimmed.
func directive(line string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "--")
	if !ok {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	return rest, strings.HasPrefix(rest, "ptah:") || strings.HasPrefix(rest, "+ptah")
}

// isNoTransaction: the directive is one of the two markers, white space
// aside. The keywords are case-sensitive, as they are everywhere else.
func isNoTransaction(d string) bool {
	f := strings.Fields(d)
	return len(f) == 1 && f[0] == "ptah:no-transaction" ||
		len(f) == 2 && f[0] == "+ptah" && f[1] == "no_transaction"
}

// isComment: a blank line or a -- comment. A block comment ends the search
// for directives as a statement does: a directive is a -- comment.
func isComment(line string) bool {
	t := strings.TrimSpace(line)
	return t == "" || strings.HasPrefix(t, "--")
}

// checkStatements refuses what cannot run as ptah runs the file.
func (f *File) checkStatements(ps *problems) {
	for _, st := range f.Statements {
		if what := transactionControl(st.Head); what != "" {
			ps.add(st.Line, f.transactionControlError(what), f.Path)
			continue
		}
		if what := refusedInTransaction(st.Head); what != "" && !f.NoTransaction {
			ps.add(st.Line, fmt.Errorf("%w: %s cannot run inside a transaction block, and this file runs in one; "+
				"put it in a file of its own whose first line is %q", ErrNeedsNoTransaction, what, NoTransactionMarker), f.Path)
		}
	}
}

func (f *File) transactionControlError(what string) error {
	if f.NoTransaction {
		return fmt.Errorf("%w: %s in a no-transaction file: ptah runs such a file one statement at a time and journals each "+
			"as it starts and ends, so a transaction spanning statements would leave the journal unable to say what committed; "+
			"put statements that must commit together in a transactional file of their own", ErrTransactionControl, what)
	}
	return fmt.Errorf("%w: %s: ptah runs each file in a transaction of its own and records it in that same transaction, "+
		"so the file is already atomic, and transaction control of its own would commit part of it outside that record; remove it",
		ErrTransactionControl, what)
}

// transactionControl names a statement that begins, ends or prepares a
// transaction; "" for any other (savepoints stay inside ptah's
// transaction and are allowed; COMMIT/ROLLBACK PREPARED settle another
// transaction).
func transactionControl(head []string) string {
	w := func(i int) string {
		if i < len(head) {
			return head[i]
		}
		return ""
	}
	switch w(0) {
	case "begin", "end", "abort":
		return strings.ToUpper(w(0))
	case "start", "prepare":
		if w(1) == "transaction" {
			return strings.ToUpper(w(0)) + " TRANSACTION"
		}
	case "commit":
		if w(1) != "prepared" {
			return "COMMIT"
		}
	case "rollback":
		toSavepoint := w(1) == "to" || (w(1) == "work" || w(1) == "transaction") && w(2) == "to"
		if w(1) != "prepared" && !toSavepoint {
			return "ROLLBACK"
		}
	}
	return ""
}

// refusedInTransaction names a statement PostgreSQL refuses inside a
// transaction block; "" for any other. It lists the ones a migration is
// likely to hold, so that the file is refused when it is read rather than
// failing when it runs.
func refusedInTransaction(head []string) string {
	h := strings.Join(head, " ")
	for _, p := range []struct{ prefix, what string }{
		{"create index concurrently", "CREATE INDEX CONCURRENTLY"},
		{"create unique index concurrently", "CREATE INDEX CONCURRENTLY"},
		{"drop index concurrently", "DROP INDEX CONCURRENTLY"},
		{"vacuum", "VACUUM"},
		{"create database", "CREATE DATABASE"},
		{"drop database", "DROP DATABASE"},
		{"create tablespace", "CREATE TABLESPACE"},
		{"drop tablespace", "DROP TABLESPACE"},
		{"alter system", "ALTER SYSTEM"},
	} {
		if h == p.prefix || strings.HasPrefix(h, p.prefix+" ") {
			return p.what
		}
	}
	if len(head) > 0 && head[0] == "reindex" && slices.Contains(head, "concurrently") {
		return "REINDEX CONCURRENTLY"
	}
	return ""
}
