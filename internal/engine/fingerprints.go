package engine

import (
	"errors"
	"fmt"

	"github.com/ptah-run/ptah/internal/fingerprint"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// PlanFingerprint covers a plan's content and every binding, in this order:
// schema name and UID, statements (SQL, then hazards), when the plan has
// them its statements' locks, destructive, lock timeout, the lock attempt and statement timeouts when set, then, when the plan has them (contract version 2), its phases
// and the lock capacity they were cut for, each as its JSON encoding, then
// the bindings as their JSON encoding. The Fingerprint field itself is not
// an input. A plan of contract version 1 has neither phases nor a lock
// capacity, and hashes as it always did.
func PlanFingerprint(s api.PtahSchemaPlanSpec) string {
	b := fingerprint.New("ptah.run/schema-plan/v1").
		String("schema.name", s.Schema.Name).
		String("schema.uid", s.Schema.UID).
		Int("statements", int64(len(s.Statements)))
	for _, st := range s.Statements {
		b.String("sql", st.SQL).Strings("hazards", st.Hazards)
	}
	if s.StatementLocks {
		// The writer decides from them how to take each statement's
		// locks, so they are content a person approves.
		b.Bool("statementLocks", true)
		for _, st := range s.Statements {
			b.JSON("locks", st.Locks)
		}
	}
	if len(s.Hints) > 0 {
		b.Strings("hints", s.Hints)
	}
	b.Bool("destructive", s.Destructive).String("lockTimeout", s.LockTimeout)
	statementLimits(b, s.LockAttemptTimeout, s.StatementTimeout)
	if len(s.Phases) > 0 || s.LockCapacity != nil {
		b.JSON("phases", s.Phases).JSON("lockCapacity", s.LockCapacity)
	}
	return b.JSON("bindings", s.Bindings).Sum()
}

// statementLimits covers a plan's lock attempt and statement timeouts,
// each only when set: a plan without them hashes as it did before they
// existed.
func statementLimits(b *fingerprint.Builder, lockAttempt, statement string) {
	if lockAttempt != "" {
		b.String("lockAttemptTimeout", lockAttempt)
	}
	if statement != "" {
		b.String("statementTimeout", statement)
	}
}

// ErrPlanTampered: a stored plan no longer hashes to its fingerprint.
var ErrPlanTampered = errors.New("plan content does not match its fingerprint")

// VerifyPlan refuses a plan whose stored content was changed after it was
// published.
func VerifyPlan(p Plan) error {
	if got := PlanFingerprint(p.Spec); got != p.Spec.Fingerprint {
		return fmt.Errorf("plan %s (uid %s): %w (stored %s, content hashes to %s); it cannot be approved or applied",
			p.Name, p.UID, ErrPlanTampered, p.Spec.Fingerprint, got)
	}
	return nil
}

// InputFingerprint covers what a claim was decided from: the plan, and the
// bindings read when it was decided. The shell derives it again from a fresh
// read before dispatch; a different value means the inputs moved.
func InputFingerprint(planFingerprint string, b api.Bindings) string {
	return fingerprint.New("ptah.run/claim-inputs/v1").
		String("plan", planFingerprint).
		JSON("bindings", b).
		Sum()
}

// StatementsDigest covers a plan's statements alone (SQL, then hazards), in
// order: what would run, whatever the database it was derived from.
func StatementsDigest(stmts []api.PlanStatement) string {
	b := fingerprint.New("ptah.run/statements/v1").Int("statements", int64(len(stmts)))
	for _, st := range stmts {
		b.String("sql", st.SQL).Strings("hazards", st.Hazards)
	}
	return b.Sum()
}
