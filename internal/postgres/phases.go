package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Phase is a run of consecutive statements of a plan that run in one
// transaction and commit together, or, when NoTransaction, one by one
// outside any transaction, each committing on its own. A plan is one or
// more phases, in order; Writer.Execute commits each before it starts the
// next, so a plan of several phases is not all-or-nothing: a failure rolls
// back its own transaction only (in a no-transaction phase, the failed
// statement only).
type Phase struct {
	// Statements is how many statements of the plan the phase runs,
	// following those of the phases before it. Only a phase that records
	// a history row may run none (an empty migration file, a baseline).
	Statements int
	// Locks is the planner's estimate of how many objects the phase's
	// transaction holds locks on when it commits (see PlanPhases).
	Locks int
	// Reason says why the phase is a transaction of its own:
	// PhaseEnumLabels, PhaseLockBudget, or "" for the plan's only
	// transaction or its main one after an enum phase. A phase built by
	// another planner (a migration file's) may say what it likes.
	Reason string
	// NoTransaction: the phase's statements run one at a time outside any
	// transaction block (autocommit), for statements PostgreSQL refuses
	// in one (CREATE INDEX CONCURRENTLY) and for migration files marked
	// -- ptah:no-transaction. Each statement's start is journaled and
	// committed before it is sent, and its completion right after it
	// succeeded (see Writer.Execute). A phase of no statements runs as a
	// transactional one.
	NoTransaction bool
	// History, when set, is the migration history row the phase records
	// in Plan.History's resource when it completes: Version, Name,
	// Checksum, How (HowRun when empty, or HowBaseline) and AppliedBy are
	// read. A transactional phase inserts it in its own transaction, so
	// the file and its row commit together; a no-transaction phase
	// inserts it with the completion of its last statement.
	History *HistoryRow
	// Also are further rows a phase of no statements records with
	// History, in the same transaction (HowBaseline only): a baseline
	// records all its versions at once, or none.
	Also []HistoryRow
}

// outsideTx reports whether the phase's statements run outside a
// transaction: a no-transaction phase that has some.
func (ph Phase) outsideTx() bool { return ph.NoTransaction && ph.Statements > 0 }

// Reasons for a phase.
const (
	// PhaseEnumLabels: the plan's leading ALTER TYPE ... ADD VALUE
	// statements, committed before the statements that use the labels
	// (PostgreSQL refuses to use a label in the transaction that added
	// it, SQLSTATE 55P04).
	PhaseEnumLabels = "enum-labels"
	// PhaseLockBudget: the plan locks more objects than one transaction
	// may hold on the server (see LockCapacity.Budget), so its statements
	// (after any enum phase) are cut into transactions that each stay
	// within the budget.
	PhaseLockBudget = "lock-budget"
	// PhaseOnline: statements PostgreSQL runs only outside a transaction
	// block, which an online plan uses so that the application keeps
	// writing (CREATE INDEX CONCURRENTLY): the phase is NoTransaction.
	PhaseOnline = "online"
)

// txLockOverhead is what a phase's transaction locks besides its
// statements' objects: its transaction ID, the run journal's tables and
// their indexes, the lease row's, the namespaces it creates in.
const txLockOverhead = 16

// LockCapacity holds the settings that size a server's shared lock table,
// which every session's locks on relations and other objects share (a
// transaction that needs more fails with "out of shared memory", SQLSTATE
// 53200, and rolls back). The zero value is an unknown capacity.
type LockCapacity struct {
	MaxLocksPerTransaction  int `json:"maxLocksPerTransaction"`
	MaxConnections          int `json:"maxConnections"`
	MaxPreparedTransactions int `json:"maxPreparedTransactions"`
}

// Slots is how many objects PostgreSQL documents can be locked at once,
// by all sessions together: max_locks_per_transaction ×
// (max_connections + max_prepared_transactions). (The table is sized for
// a few more processes and may borrow spare shared memory; that slack is
// not promised, so it is not counted on.)
func (c LockCapacity) Slots() int {
	return c.MaxLocksPerTransaction * (c.MaxConnections + c.MaxPreparedTransactions)
}

// Budget is how many locks one transaction of a plan may hold: half the
// documented slots, leaving the other half to every other session of the
// server while the plan runs. 0 means no budget (the capacity is
// unknown), and a plan is then cut only where it must be.
func (c LockCapacity) Budget() int { return c.Slots() / 2 }

// ReadLockCapacity reads the lock table's settings, which any role may.
func ReadLockCapacity(ctx context.Context, q querier) (LockCapacity, error) {
	var c LockCapacity
	err := q.QueryRow(ctx, `SELECT current_setting('max_locks_per_transaction')::int,
		current_setting('max_connections')::int, current_setting('max_prepared_transactions')::int`).
		Scan(&c.MaxLocksPerTransaction, &c.MaxConnections, &c.MaxPreparedTransactions)
	if err != nil {
		return LockCapacity{}, fmt.Errorf("reading the server's lock settings: %w", err)
	}
	return c, nil
}

// PlanPhases cuts statements into the phases a plan runs in: as few as
// possible, each holding at most budget locks (0: no budget), in order.
//
//   - Leading ALTER TYPE ... ADD VALUE statements followed by others are
//     a phase of their own (PhaseEnumLabels). Diff puts every such
//     statement first, where the move is known to be safe (see
//     catalog.alterEnum); nothing is moved here, and a plan of ADD VALUE
//     statements alone is one transaction like any other.
//   - Consecutive statements PostgreSQL refuses in a transaction block
//     (Statement.NoTransaction) are a phase run without one
//     (PhaseOnline), where they stand in the plan: nothing is moved, so a
//     plan's transactional statements around them are cut in two.
//   - Each run of the other statements is one phase if it fits the
//     budget, else the fewest phases that do (PhaseLockBudget), each
//     taking statements until the next would take it over. A statement
//     over the budget on its own still runs, in a phase of its own: there
//     is no smaller transaction.
//
// A phase's locks are txLockOverhead plus the distinct objects its
// statements' LockKeys name: a table created and then indexed in one phase
// counts once. It is an estimate, from what the statements say they lock.
func PlanPhases(stmts []Statement, budget int) []Phase {
	var phases []Phase
	start := 0
	if n := leadingEnumLabels(stmts); n > 0 && n < len(stmts) {
		phases = append(phases, Phase{Statements: n, Locks: estimateLocks(stmts[:n]), Reason: PhaseEnumLabels})
		start = n
	}
	for start < len(stmts) {
		noTx := stmts[start].NoTransaction
		end := start
		for end < len(stmts) && stmts[end].NoTransaction == noTx {
			end++
		}
		if noTx {
			phases = append(phases, Phase{Statements: end - start, Locks: estimateLocks(stmts[start:end]),
				Reason: PhaseOnline, NoTransaction: true})
		} else {
			phases = append(phases, cutToBudget(stmts[start:end], budget)...)
		}
		start = end
	}
	return phases
}

// cutToBudget cuts a run of transactional statements into the fewest
// phases that each hold at most budget locks.
func cutToBudget(stmts []Statement, budget int) []Phase {
	var cut []Phase
	held := map[string]bool{}
	cur := Phase{}
	for _, s := range stmts {
		added := 0
		for _, l := range s.LockKeys {
			if !held[l] {
				added++
			}
		}
		if budget > 0 && cur.Statements > 0 && txLockOverhead+len(held)+added > budget {
			cur.Locks = txLockOverhead + len(held)
			cut = append(cut, cur)
			cur, held = Phase{}, map[string]bool{}
		}
		for _, l := range s.LockKeys {
			held[l] = true
		}
		cur.Statements++
	}
	cur.Locks = txLockOverhead + len(held)
	cut = append(cut, cur)
	if len(cut) > 1 {
		for i := range cut {
			cut[i].Reason = PhaseLockBudget
		}
	}
	return cut
}

func estimateLocks(stmts []Statement) int {
	held := map[string]bool{}
	for _, s := range stmts {
		for _, l := range s.LockKeys {
			held[l] = true
		}
	}
	return txLockOverhead + len(held)
}

// leadingEnumLabels counts the statements at the start that add labels
// to enum types.
func leadingEnumLabels(stmts []Statement) int {
	n := 0
	for n < len(stmts) && addsEnumLabel(stmts[n].SQL) {
		n++
	}
	return n
}

// phases returns the plan's phases: its own, checked to cover its
// statements exactly and to record history rows it can record, or, when
// it has none (a plan built by hand), those PlanPhases gives without a
// lock budget.
func (p *Plan) phases() ([]Phase, error) {
	if p.History != nil && p.History.Resource == "" {
		return nil, errors.New("the plan's history names no resource")
	}
	if len(p.Phases) == 0 {
		return PlanPhases(p.Statements, 0), nil
	}
	total := 0
	versions := map[string]int{}
	for i, ph := range p.Phases {
		if ph.Statements < 0 || ph.Statements == 0 && ph.History == nil {
			return nil, fmt.Errorf("phase %d of the plan runs %d statements", i+1, ph.Statements)
		}
		if h := ph.History; h != nil {
			switch {
			case p.History == nil:
				return nil, fmt.Errorf("phase %d of the plan records version %s, and the plan names no history", i+1, h.Version)
			case h.How != "" && h.How != HowRun && h.How != HowBaseline:
				return nil, fmt.Errorf("phase %d of the plan records version %s as %q; a plan records %q or %q", i+1, h.Version, h.How, HowRun, HowBaseline)
			case versions[h.Version] > 0:
				return nil, fmt.Errorf("phases %d and %d of the plan both record version %s", versions[h.Version], i+1, h.Version)
			}
			if err := h.check(); err != nil {
				return nil, fmt.Errorf("phase %d of the plan: %w", i+1, err)
			}
			versions[h.Version] = i + 1
		}
		if len(ph.Also) > 0 && (ph.History == nil || ph.Statements > 0 || ph.History.How != HowBaseline) {
			return nil, fmt.Errorf("phase %d of the plan records further versions; only a baseline phase of no statements may", i+1)
		}
		for _, h := range ph.Also {
			switch {
			case h.How != HowBaseline:
				return nil, fmt.Errorf("phase %d of the plan records version %s as %q with a baseline", i+1, h.Version, h.How)
			case versions[h.Version] > 0:
				return nil, fmt.Errorf("phases %d and %d of the plan both record version %s", versions[h.Version], i+1, h.Version)
			}
			if err := h.check(); err != nil {
				return nil, fmt.Errorf("phase %d of the plan: %w", i+1, err)
			}
			versions[h.Version] = i + 1
		}
		total += ph.Statements
	}
	if total != len(p.Statements) {
		return nil, fmt.Errorf("the plan's phases run %d statements, and it has %d", total, len(p.Statements))
	}
	return p.Phases, nil
}

// Transactions returns the plan's phases, as Writer.Execute runs them
// (nil for a plan of no statements, or whose phases do not cover its
// statements, which Execute refuses to run).
func (p *Plan) Transactions() []Phase {
	phases, err := p.phases()
	if err != nil {
		return nil
	}
	return phases
}

// addsEnumLabel reports whether sql is an ALTER TYPE name ADD VALUE
// statement: keywords in any case, the name optionally schema-qualified,
// either part quoted or not.
func addsEnumLabel(sql string) bool {
	rest, ok := keywords(sql, "alter", "type")
	if !ok {
		return false
	}
	if rest, ok = identifier(rest); !ok {
		return false
	}
	if after, dot := strings.CutPrefix(strings.TrimLeft(rest, " \t\r\n\f"), "."); dot {
		if rest, ok = identifier(after); !ok {
			return false
		}
	}
	_, ok = keywords(rest, "add", "value")
	return ok
}

// keywords consumes the words, each preceded by optional white space and
// followed by white space, or the end, or a quote or parenthesis.
func keywords(s string, words ...string) (string, bool) {
	for _, w := range words {
		s = strings.TrimLeft(s, " \t\r\n\f")
		if len(s) < len(w) || !strings.EqualFold(s[:len(w)], w) {
			return s, false
		}
		s = s[len(w):]
		if s != "" && !strings.ContainsAny(s[:1], " \t\r\n\f\"'(") {
			return s, false
		}
	}
	return s, true
}

// identifier consumes one identifier, quoted or not, after optional white
// space.
func identifier(s string) (string, bool) {
	s = strings.TrimLeft(s, " \t\r\n\f")
	if after, quoted := strings.CutPrefix(s, `"`); quoted {
		for i := 0; i < len(after); i++ {
			if after[i] != '"' {
				continue
			}
			if i+1 < len(after) && after[i+1] == '"' {
				i++ // a doubled quote
				continue
			}
			return after[i+1:], i > 0
		}
		return s, false
	}
	end := strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r == '$' || r >= 0x80 || unicode.IsLetter(r) || unicode.IsDigit(r))
	})
	if end < 0 {
		end = len(s)
	}
	return s[end:], end > 0
}
