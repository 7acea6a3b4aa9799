package postgres

import (
	"fmt"
	"strings"
	"time"
)

// Hazard names a risk a statement carries when run against a live database.
type Hazard string

const (
	// HazardDeletesData: the statement drops stored data (a table, a column,
	// a materialized view's contents, a sequence's position).
	HazardDeletesData Hazard = "deletes-data"
	// HazardRewritesTable: PostgreSQL rewrites every row of the table.
	HazardRewritesTable Hazard = "rewrites-table"
	// HazardBlocksReads: the statement holds ACCESS EXCLUSIVE on an
	// existing relation while it does work that grows with the table (a
	// rewrite, an index build, a scan): reads of it wait that long.
	HazardBlocksReads Hazard = "blocks-reads"
	// HazardBlocksWrites: the statement holds a lock that blocks writes on
	// an existing relation (SHARE or stronger) while it does work that
	// grows with the table: writes wait that long.
	HazardBlocksWrites Hazard = "blocks-writes"
	// HazardBuildsIndex: an index is built over an existing table's rows.
	HazardBuildsIndex Hazard = "builds-index-on-existing-table"
	// HazardScansTable: the statement reads every row of an existing
	// table (a constraint's validation, a check of the rows already
	// there): it takes time and I/O, and holds its locks meanwhile
	// (blocks-reads, blocks-writes say what they hold up).
	HazardScansTable Hazard = "scans-table"
	// HazardMayFail: rows already in the table may make the statement fail
	// (a new constraint, NOT NULL, a type conversion).
	HazardMayFail Hazard = "may-fail-on-existing-data"
)

// destructiveHazards are the hazards that make a plan destructive.
var destructiveHazards = map[Hazard]bool{HazardDeletesData: true}

// Statement is one step of a plan.
type Statement struct {
	SQL     string
	Hazards []Hazard
	// Locks are the locks stronger than ROW EXCLUSIVE the statement takes
	// on relations that existed when it was planned (tables, views,
	// materialized views, sequences, indexes), the strongest per relation:
	// what the application may wait for while the statement runs. A plan
	// whose LocksKnown is false (a migration's hand-written SQL) has none.
	Locks []Lock
	// LockKeys names the objects the statement locks, as the planner sees
	// them: the relations it creates, alters or drops, their indexes and
	// TOAST tables, the tables it references. Only PlanPhases reads it,
	// to cut a plan into transactions; a published plan keeps the phases,
	// not the keys.
	LockKeys []string
	// NoTransaction: PostgreSQL refuses the statement in a transaction
	// block (CREATE INDEX CONCURRENTLY, DROP INDEX CONCURRENTLY), so
	// PlanPhases puts it in a phase run without one (Phase.NoTransaction).
	NoTransaction bool
}

// Plan is the ordered DDL that takes a live database to the desired state.
type Plan struct {
	Statements []Statement
	// Phases are the transactions the plan runs in, in order (see
	// PlanPhases); their statements add up to the plan's. A plan without
	// phases runs as PlanPhases(Statements, 0) cuts it.
	Phases []Phase
	// LockCapacity is the target server's lock table, which the phases
	// were cut to fit; zero when not known.
	LockCapacity LockCapacity
	// LocksKnown: each statement's Locks are the planner's account of
	// what it locks (a schema plan), so a statement with none takes no
	// lock the application could queue behind. False: the statements'
	// locks are not known (a migration's files), and the writer guesses
	// from each statement's leading keywords.
	LocksKnown bool
	// Destructive is true when any statement deletes data.
	Destructive bool
	// Hints are advice for whoever reviews the plan (a drop and an add that
	// look like a rename); they change nothing it does.
	Hints []string
	// LockTimeout is each statement's budget for lock waits: how long, in
	// all, it may wait for its locks before the plan fails with a lock
	// timeout (IsLockTimeout). A statement of a transactional phase spends
	// it in attempts (see LockAttempt); one of a no-transaction phase, and
	// every statement of the script psql runs (Script), in one.
	LockTimeout time.Duration
	// LockAttempt is how long one attempt of a statement of a
	// transactional phase may wait for its locks. A statement that waits
	// for a strong lock (ALTER TABLE takes ACCESS EXCLUSIVE) behind an open
	// transaction holds up, for as long as it waits, every session that
	// asks for the table after it, readers included: PostgreSQL queues
	// them behind it. So the writer waits one attempt at most, then steps
	// out of the queue (rolls the statement back to a savepoint taken just
	// before it) so that those sessions go through, backs off, and tries
	// again, until LockTimeout is spent (see Writer.execInAttempts).
	//
	// 0 means 100ms. A negative value, or one of LockTimeout or more,
	// means one attempt of LockTimeout, as psql would make.
	LockAttempt time.Duration
	// StatementTimeout, when set, bounds how long each statement may run,
	// its lock waits included (PostgreSQL's statement_timeout), each
	// attempt afresh. The run's deadline bounds every statement anyway:
	// the smaller of the two applies. 0: the deadline only; a CREATE
	// INDEX CONCURRENTLY, say, then runs for as long as the deadline
	// allows.
	StatementTimeout time.Duration
	// History names the migration history the phases' history rows go
	// to, and the one the plan expects to find; nil for a plan that
	// records none (a schema plan).
	History *PlanHistory
	// SearchPath, when set, is the search_path the plan's statements run
	// under: a migration's hand-written SQL names objects as its author's
	// sessions do (see DefaultSearchPath). Empty: pg_catalog only, the
	// writer's own, for which every statement of a schema plan is
	// schema-qualified.
	SearchPath string
}

// PlanHistory is the migration history a plan records into and runs
// against.
type PlanHistory struct {
	// Resource is whose history it is, e.g. "PtahMigration/default/app".
	Resource string
	// Expect, when set, is called by Writer.Execute with the resource's
	// history as the writer reads it, under the lease, just before the
	// plan's first statement (see Writer.Execute). An error refuses the
	// run: nothing executes, and Execute returns ErrNotStarted and
	// ErrHistoryMoved with it. It runs while the writer holds a
	// transaction open: it must be quick and must not use the Writer.
	Expect func([]HistoryRow) error
}

// Preamble returns the session settings every statement of the plan runs
// under, as SET statements. Its lock_timeout is the whole budget,
// LockTimeout: psql, which runs it as is (Script), makes one attempt per
// statement; the writer, in a transactional phase, sets each attempt's
// over it (see LockAttempt).
func (p *Plan) Preamble() []string {
	pre := []string{
		fmt.Sprintf("SET lock_timeout = '%dms'", p.LockTimeout.Milliseconds()),
		// Function bodies may name objects created later in the plan.
		"SET check_function_bodies = false",
	}
	if p.StatementTimeout > 0 {
		// The writer arms each statement's over it (see armStatement).
		pre = append(pre, fmt.Sprintf("SET statement_timeout = '%dms'", p.StatementTimeout.Milliseconds()))
	}
	if p.SearchPath != "" {
		pre = append(pre, "SET search_path = "+p.SearchPath)
	}
	return pre
}

// Script renders the plan as a script psql runs as-is
// (psql -v ON_ERROR_STOP=1 -f -), in the transactions ptah runs it in:
// each phase between BEGIN and COMMIT, headed by a comment saying which
// statements it holds and why it is a transaction of its own. An empty
// plan renders as no statements.
func (p *Plan) Script() string {
	if len(p.Statements) == 0 {
		return "-- ptah: no changes\n"
	}
	phases := p.Transactions()
	// A plan with a phase run without a transaction counts phases, not
	// transactions.
	unit := "transaction"
	if anyNoTransaction(phases) {
		unit = "phase"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- ptah plan: %d statement(s)", len(p.Statements))
	if len(phases) > 1 {
		fmt.Fprintf(&b, " in %d %ss", len(phases), unit)
	}
	if p.Destructive {
		b.WriteString(", destructive")
	}
	b.WriteString("\n")
	for _, line := range p.TransactionsNote() {
		b.WriteString("-- " + line + "\n")
	}
	for _, s := range p.Preamble() {
		b.WriteString(s + ";\n")
	}
	next := 0
	for k, ph := range phases {
		if len(phases) > 1 || ph.outsideTx() {
			fmt.Fprintf(&b, "\n-- %s %d/%d: %s", unit, k+1, len(phases), statementRange(next, ph.Statements))
			if ph.outsideTx() {
				b.WriteString(", without a transaction")
			}
			if ph.Reason != "" {
				fmt.Fprintf(&b, " (%s)", ph.Reason)
			}
			if ph.History != nil {
				fmt.Fprintf(&b, ", version %s", ph.History.Version)
			}
			b.WriteString("\n")
		}
		if !ph.outsideTx() {
			b.WriteString("BEGIN;\n")
		}
		for i := next; i < next+ph.Statements; i++ {
			s := p.Statements[i]
			fmt.Fprintf(&b, "\n-- %d/%d", i+1, len(p.Statements))
			if len(s.Hazards) > 0 {
				fmt.Fprintf(&b, " hazards: %s", joinHazards(s.Hazards))
			}
			if len(s.Locks) > 0 {
				locks := make([]string, len(s.Locks))
				for j, l := range s.Locks {
					locks[j] = l.String()
				}
				if len(s.Hazards) > 0 {
					b.WriteString(";")
				}
				fmt.Fprintf(&b, " locks: %s", strings.Join(locks, ", "))
			}
			b.WriteString("\n" + s.SQL + ";\n")
		}
		if !ph.outsideTx() {
			b.WriteString("COMMIT;\n")
		}
		next += ph.Statements
	}
	return b.String()
}

// TransactionsNote explains, in a few sentences, why a plan runs in more
// than one transaction, and what that means if one fails; nil for a plan
// of one transaction. The text output and the script both print it.
func (p *Plan) TransactionsNote() []string {
	phases := p.Transactions()
	noTx := anyNoTransaction(phases)
	if len(phases) < 2 && !noTx {
		return nil
	}
	var lines, alone []string
	next, locks, parts := 0, 0, 0
	for _, ph := range phases {
		if ph.outsideTx() {
			alone = append(alone, statementRange(next, ph.Statements))
			next += ph.Statements
			continue
		}
		switch ph.Reason {
		case PhaseEnumLabels:
			what := "adds an enum label and commits first, on its own"
			if ph.Statements > 1 {
				what = "add enum labels and commit first, on their own"
			}
			lines = append(lines, fmt.Sprintf("%s %s: PostgreSQL cannot use a label in the transaction that adds it.",
				capitalize(statementRange(next, ph.Statements)), what))
		case PhaseLockBudget:
			locks += ph.Locks
			parts++
		}
		next += ph.Statements
	}
	if parts > 0 {
		c := p.LockCapacity
		lines = append(lines, fmt.Sprintf(
			"The plan locks about %d objects; one transaction may hold %d on this server (half its lock table: max_locks_per_transaction %d x (max_connections %d + max_prepared_transactions %d)), so it commits in %d parts.",
			locks, c.Budget(), c.MaxLocksPerTransaction, c.MaxConnections, c.MaxPreparedTransactions, parts))
	}
	if !noTx {
		return append(lines, "If a transaction fails, it rolls back, and those before it stay committed.")
	}
	verb := "run"
	if len(alone) == 1 && strings.HasPrefix(alone[0], "statement ") {
		verb = "runs"
	}
	lines = append(lines, fmt.Sprintf("%s %s without a transaction, one at a time (PostgreSQL refuses some statements, such as CREATE INDEX CONCURRENTLY, in one): each commits on its own.",
		capitalize(strings.Join(alone, ", ")), verb))
	if len(phases) > 1 {
		lines = append(lines, "If a transaction fails, it rolls back, and what committed before it stays committed.")
	}
	return append(lines, "If a statement run without a transaction fails, the statements before it stay committed; if it is cut short, it may or may not have taken effect.")
}

func anyNoTransaction(phases []Phase) bool {
	for _, ph := range phases {
		if ph.outsideTx() {
			return true
		}
	}
	return false
}

// statementRange names statements [from, from+n) of a plan, 1-based.
func statementRange(from, n int) string {
	switch n {
	case 0:
		return "no statements"
	case 1:
		return fmt.Sprintf("statement %d", from+1)
	}
	return fmt.Sprintf("statements %d-%d", from+1, from+n)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func joinHazards(hs []Hazard) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = string(h)
	}
	return strings.Join(parts, ", ")
}

// Destructive reports whether any of the statements deletes data.
func Destructive(stmts []Statement) bool {
	for _, s := range stmts {
		for _, h := range s.Hazards {
			if destructiveHazards[h] {
				return true
			}
		}
	}
	return false
}
