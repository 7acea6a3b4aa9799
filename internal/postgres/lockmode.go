package postgres

import (
	"fmt"
	"strings"
)

// LockMode is one of PostgreSQL's table-level lock modes, ordered from
// the weakest to the strongest (each conflicts with at least what the one
// before it conflicts with, but for SHARE and SHARE UPDATE EXCLUSIVE,
// which do not conflict with each other's holders' reads or writes).
type LockMode int

const (
	AccessShare LockMode = iota + 1
	RowShare
	RowExclusive
	ShareUpdateExclusive
	Share
	ShareRowExclusive
	Exclusive
	AccessExclusive
)

var lockModeNames = [...]string{
	AccessShare:          "ACCESS SHARE",
	RowShare:             "ROW SHARE",
	RowExclusive:         "ROW EXCLUSIVE",
	ShareUpdateExclusive: "SHARE UPDATE EXCLUSIVE",
	Share:                "SHARE",
	ShareRowExclusive:    "SHARE ROW EXCLUSIVE",
	Exclusive:            "EXCLUSIVE",
	AccessExclusive:      "ACCESS EXCLUSIVE",
}

// String is the mode as the LOCK statement and PostgreSQL's documentation
// name it ("ACCESS EXCLUSIVE").
func (m LockMode) String() string {
	if m < AccessShare || m > AccessExclusive {
		return fmt.Sprintf("LockMode(%d)", int(m))
	}
	return lockModeNames[m]
}

// ParseLockMode reads a mode as String writes it or as pg_locks.mode
// shows it ("AccessExclusiveLock").
func ParseLockMode(s string) (LockMode, bool) {
	for m := AccessShare; m <= AccessExclusive; m++ {
		if s == lockModeNames[m] || s == pgLocksName(m) {
			return m, true
		}
	}
	return 0, false
}

// pgLocksName is the mode as pg_locks.mode shows it.
func pgLocksName(m LockMode) string {
	var b strings.Builder
	for _, w := range strings.Fields(lockModeNames[m]) {
		b.WriteString(w[:1] + strings.ToLower(w[1:]))
	}
	return b.String() + "Lock"
}

// BlocksReads: the mode conflicts with the ACCESS SHARE lock every SELECT
// takes.
func (m LockMode) BlocksReads() bool { return m == AccessExclusive }

// BlocksWrites: the mode conflicts with the ROW EXCLUSIVE lock every
// INSERT, UPDATE and DELETE takes.
func (m LockMode) BlocksWrites() bool { return m >= Share }

// Lock is a lock a statement takes on one relation.
type Lock struct {
	// Relation is the relation's schema-qualified name, quoted as SQL
	// quotes it ("public.accounts").
	Relation string
	Mode     LockMode
}

func (l Lock) String() string { return l.Mode.String() + " on " + l.Relation }

// StrongestLock is the strongest of a statement's locks; 0 when it has
// none.
func (s Statement) StrongestLock() LockMode {
	var m LockMode
	for _, l := range s.Locks {
		m = max(m, l.Mode)
	}
	return m
}

// LockHazards is hazards with blocks-reads and blocks-writes set from the
// statement's locks: a statement that does work that grows with a table
// (it rewrites one, builds an index over one, or reads every row of one)
// holds its locks that long, so the application feels them. A statement
// that may fail on existing data without reading the table for it (a
// sequence's new bounds against its current value) does not count. ACCESS EXCLUSIVE makes reads wait; SHARE and
// stronger make writes wait. A statement that only changes the catalog
// holds its locks for an instant, which the writer's short lock attempts
// keep from queueing anyone (see Plan.LockAttempt). Whatever blocks-reads
// or blocks-writes hazards held before are recomputed.
func LockHazards(hazards []Hazard, locks []Lock) []Hazard {
	out := make([]Hazard, 0, len(hazards)+2)
	work := false
	for _, h := range hazards {
		switch h {
		case HazardBlocksReads, HazardBlocksWrites:
			continue
		case HazardRewritesTable, HazardBuildsIndex, HazardScansTable:
			work = true
		}
		out = append(out, h)
	}
	if !work {
		return nilIfEmpty(out)
	}
	var strongest LockMode
	for _, l := range locks {
		strongest = max(strongest, l.Mode)
	}
	if strongest.BlocksReads() {
		out = append(out, HazardBlocksReads)
	}
	if strongest.BlocksWrites() {
		out = append(out, HazardBlocksWrites)
	}
	return nilIfEmpty(out)
}

func nilIfEmpty(h []Hazard) []Hazard {
	if len(h) == 0 {
		return nil
	}
	return h
}
