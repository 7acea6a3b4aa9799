package migrate

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels callers classify with errors.Is. A SourceError unwraps to the
// sentinel of each of its problems.
var (
	// ErrBadLayout: a layout name that is none of the known layouts.
	ErrBadLayout = errors.New("unknown migration layout")
	// ErrEmpty: the directory holds no migration file.
	ErrEmpty = errors.New("no migration files")
	// ErrMixedLayouts: the directory holds files of more than one layout,
	// so which of them are migrations cannot be decided.
	ErrMixedLayouts = errors.New("files of more than one layout")
	// ErrBadFileName: a .sql file whose name is not a migration's name in
	// the layout.
	ErrBadFileName = errors.New("not a migration file name")
	// ErrBadVersion: a version that is not digits separated by dots or
	// underscores.
	ErrBadVersion = errors.New("not a version")
	// ErrDuplicateVersion: two files of the same version.
	ErrDuplicateVersion = errors.New("duplicate version")
	// ErrNoStatements: a file with nothing to run.
	ErrNoStatements = errors.New("no statements")
	// ErrBadSQL: a file the SQL lexer cannot split into statements.
	ErrBadSQL = errors.New("cannot split into statements")
	// ErrTransactionControl: a file that begins or ends transactions
	// itself, which would defeat how ptah runs and records it.
	ErrTransactionControl = errors.New("transaction control in a migration")
	// ErrNeedsNoTransaction: a transactional file holding a statement that
	// PostgreSQL refuses inside a transaction block.
	ErrNeedsNoTransaction = errors.New("statement cannot run in a transaction")
	// ErrBadDirective: a ptah directive comment that is unknown or not on
	// the first line.
	ErrBadDirective = errors.New("bad ptah directive")
	// ErrBadSum: a ptah.sum that cannot be read.
	ErrBadSum = errors.New("malformed " + SumFile)
	// ErrSumMismatch: the files are not the ones ptah.sum was written for.
	ErrSumMismatch = errors.New("files differ from " + SumFile)
)

// Problem is one thing wrong with a migration directory.
type Problem struct {
	// Paths are the files concerned, relative to the directory: one for
	// most problems, several for a duplicate version or mixed layouts.
	Paths []string
	// Line is where in the first file the problem is; 0 for the whole file.
	Line int
	// Err says what is wrong and wraps one of the sentinels.
	Err error
}

func (p Problem) Error() string {
	where := strings.Join(p.Paths, ", ")
	if p.Line > 0 {
		where = fmt.Sprintf("%s:%d", where, p.Line)
	}
	if where == "" {
		return p.Err.Error()
	}
	return where + ": " + p.Err.Error()
}

func (p Problem) Unwrap() error { return p.Err }

// SourceError is every problem found reading a migration directory,
// reported together so that one edit can fix them all.
type SourceError struct {
	Dir      string // as given to ReadDir; "" for Read
	Problems []Problem
}

func (e *SourceError) Error() string {
	var b strings.Builder
	b.WriteString("migrations")
	if e.Dir != "" {
		b.WriteString(" in " + e.Dir)
	}
	if len(e.Problems) == 1 {
		b.WriteString(": " + e.Problems[0].Error())
	} else {
		fmt.Fprintf(&b, ": %d problems:", len(e.Problems))
		for _, p := range e.Problems {
			b.WriteString("\n  " + p.Error())
		}
	}
	if errors.Is(e, ErrSumMismatch) {
		b.WriteString("\nnothing was run; if these changes are intended (and none of them was applied anywhere), run `ptah migrate hash` to rewrite " + SumFile)
	}
	return b.String()
}

// Unwrap lets errors.Is and errors.As see every problem.
func (e *SourceError) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// problems collects what is wrong while a directory is read.
type problems []Problem

func (ps *problems) add(line int, err error, paths ...string) {
	*ps = append(*ps, Problem{Paths: paths, Line: line, Err: err})
}

// err is nil when nothing was found, else a SourceError.
func (ps problems) err(dir string) error {
	if len(ps) == 0 {
		return nil
	}
	return &SourceError{Dir: dir, Problems: ps}
}
