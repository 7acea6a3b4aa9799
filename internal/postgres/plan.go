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
	// HazardBlocksWrites: the statement holds a lock that blocks writes (or
	// reads and writes) on a table for longer than a catalog update.
	HazardBlocksWrites Hazard = "blocks-writes"
	// HazardBuildsIndex: an index is built over an existing table's rows.
	HazardBuildsIndex Hazard = "builds-index-on-existing-table"
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
}

// Plan is the ordered DDL that takes a live database to the desired state.
type Plan struct {
	Statements []Statement
	// Destructive is true when any statement deletes data.
	Destructive bool
	// LockTimeout bounds how long each statement waits for a lock.
	LockTimeout time.Duration
}

// Preamble returns the session settings every statement of the plan runs
// under, as SET statements.
func (p *Plan) Preamble() []string {
	return []string{
		fmt.Sprintf("SET lock_timeout = '%dms'", p.LockTimeout.Milliseconds()),
		// Function bodies may name objects created later in the plan.
		"SET check_function_bodies = false",
	}
}

// Script renders the plan as a script psql runs as-is
// (psql -v ON_ERROR_STOP=1 -f -). An empty plan renders as no statements.
func (p *Plan) Script() string {
	if len(p.Statements) == 0 {
		return "-- ptah: no changes\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- ptah plan: %d statement(s)", len(p.Statements))
	if p.Destructive {
		b.WriteString(", destructive")
	}
	b.WriteString("\n")
	for _, s := range p.Preamble() {
		b.WriteString(s + ";\n")
	}
	for i, s := range p.Statements {
		fmt.Fprintf(&b, "\n-- %d/%d", i+1, len(p.Statements))
		if len(s.Hazards) > 0 {
			fmt.Fprintf(&b, " hazards: %s", joinHazards(s.Hazards))
		}
		b.WriteString("\n" + s.SQL + ";\n")
	}
	return b.String()
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
