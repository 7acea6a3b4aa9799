package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/fingerprint"
	"github.com/ptah-run/ptah/internal/migrate"
	"github.com/ptah-run/ptah/internal/postgres"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// This file holds the PtahMigration family's pieces of local mode's shell:
// what a migration binds, how its history and journal are read into an
// observation (observeMigration), how a stored plan becomes what the
// writer executes (migrationExecPlan), and how the writer's answer
// becomes the run the engine accounts for (classifyMigration). The pass
// that drives them is the one the schema family runs (pass.go).

// storeResource is the key of the resource's records in the database:
// its migration history (ptah.migration_history.resource) and its runs
// in the journal (ptah.runs.resource). Its writer must be opened under
// this name (postgres.OpenWriter's resource), or observeMigration cannot
// find its runs.
func (r Resource) storeResource() string {
	if r.Migration == nil {
		return r.Schema.Name
	}
	return api.KindPtahMigration + "/" + r.namespace() + "/" + r.Migration.Name
}

// MigrationCoordinationDigest names a migration's database for
// coordination. It is CoordinationDigest itself, over the migration's
// target: a PtahSchema and a PtahMigration of one target (and key) get
// one digest, so that one census and one lease span both families.
func MigrationCoordinationDigest(spec api.PtahMigrationSpec, targetDigest string) string {
	return CoordinationDigest(api.PtahSchemaSpec{Target: spec.Target}, targetDigest)
}

// MigrationPolicyFingerprint covers what governs applying a migration:
// spec.policy.apply and spec.policy.lockTimeout, then its lock attempt and
// statement timeouts when set, in that order, in a domain of its own (a
// schema's policy fingerprint never equals a migration's, whatever their
// fields).
func MigrationPolicyFingerprint(spec api.PtahMigrationSpec) string {
	b := fingerprint.New("ptah.run/migration-policy/v1").
		String("apply", string(spec.Policy.Apply)).
		String("lockTimeout", spec.Policy.LockTimeout)
	return withStatementLimits(b, spec.Policy.LockAttemptTimeout, spec.Policy.StatementTimeout).Sum()
}

// withStatementLimits adds a policy's lock attempt and statement timeouts
// to a fingerprint, each only when set: a policy without them hashes as it
// did before they existed.
func withStatementLimits(b *fingerprint.Builder, lockAttempt, statement string) *fingerprint.Builder {
	if lockAttempt != "" {
		b.String("lockAttemptTimeout", lockAttempt)
	}
	if statement != "" {
		b.String("statementTimeout", statement)
	}
	return b
}

// migrationBindings are the bindings of a reading of res: the source's
// digest (its ptah.sum total, "" when it could not be read), the target
// and coordination digests as the schema family computes them, the
// policy, the history fingerprint read, and the ptah that read it. The
// actual and desired state fingerprints stay empty (a baseline plan
// alone fills them).
func migrationBindings(res Resource, identity, historyFingerprint string, binding api.ExecutionBinding) api.Bindings {
	artifact := ""
	if res.Source != nil {
		artifact = res.Source.Digest()
	}
	return api.Bindings{
		ArtifactDigest:       artifact,
		CoordinationDigest:   MigrationCoordinationDigest(res.Migration.Spec, identity),
		TargetIdentityDigest: identity,
		PolicyFingerprint:    MigrationPolicyFingerprint(res.Migration.Spec),
		HistoryFingerprint:   historyFingerprint,
		ExecutionBinding:     binding,
	}
}

// observeMigration reads res's history and run journal through conn, and
// compares them with its source (migrate.Compare).
//
// Two uncertainties the history table cannot show are passed to Compare
// as holds, each naming its operation and the versions of it that the
// journal shows started and the history lacks:
//
//   - Unresolved: st.UnresolvedRun, a run whose outcome only a person can
//     settle.
//   - Dirty: the resource's newest run in the journal, when it never
//     finished, no record of st stands for it, no history row a person
//     marked names it, and its writer can no longer write
//     (postgres.WriterMayStillWrite). The records that stand for a run
//     are st.UnresolvedRun (the hold above), st.ActiveOperation (the
//     pass settles a dispatched claim itself), st.LastRun (a run whose
//     outcome is known: a failure the writer could not journal leaves its
//     run unfinished) and st.ResolvedRun (a person settled it). Only the
//     newest run can be dirty: a writer journals a run only after it
//     re-derived the inputs under the lease, which takes this reading, so
//     a run journaled after another proves that the earlier one was
//     settled, or known, by then. A run whose writer may still write is
//     not dirty yet: it holds the database's lease, so nothing else runs
//     meanwhile, and the inputs re-derived under the lease once it is
//     gone see it.
//
// The history fingerprint covers the rows and the operation IDs of the
// holds, as migrate.HistoryFingerprint's unresolved mark (one hold: its
// operation ID; several: theirs, space-separated, in order), so that a
// run left dirty moves the inputs of a claim exactly as an unresolved one
// does.
//
// A source that could not be read is Blocked (SourceInvalid), with the
// history read all the same. The error is for what could not be read in
// the database.
func observeMigration(ctx context.Context, conn *pgx.Conn, res Resource, identity string, st api.PtahMigrationStatus,
	binding api.ExecutionBinding) (*engine.MigrationObservation, error) {
	resource := res.storeResource()
	rows, err := postgres.ReadHistory(ctx, conn, resource)
	if err != nil {
		return nil, err
	}
	applied := appliedRows(rows)
	holds, err := migrationHolds(ctx, conn, resource, MigrationCoordinationDigest(res.Migration.Spec, identity), st, applied)
	if err != nil {
		return nil, fmt.Errorf("reading the run journal of %s: %w", resource, err)
	}
	summary := historySummary(applied, migrate.HistoryFingerprint(applied, historyMark(holds)))
	obs := &engine.MigrationObservation{
		Bindings:    migrationBindings(res, identity, summary.Fingerprint, binding),
		History:     summary,
		LockTimeout: res.Migration.Spec.Policy.LockTimeout,

		LockAttemptTimeout: res.Migration.Spec.Policy.LockAttemptTimeout,
		StatementTimeout:   res.Migration.Spec.Policy.StatementTimeout,
	}
	if res.Source == nil {
		obs.Blocked, obs.Reason = true, api.ReasonSourceInvalid
		obs.Message = fmt.Sprintf("the migration source cannot be read as a sequence: %v; nothing is planned until it can", res.SourceErr)
		return obs, nil
	}
	v := migrate.Compare(res.Source, applied, holds...)
	obs.Message = v.Message()
	if v.Blocked() {
		obs.Blocked, obs.Reason = true, migrationReason(v.Kind)
		return obs, nil
	}
	obs.Reason = v.Reason()
	for _, f := range v.Pending {
		obs.Pending = append(obs.Pending, api.MigrationVersion{Version: f.Version.String(), Name: f.Name, Checksum: f.Checksum,
			NoTransaction: f.NoTransaction})
	}
	return obs, nil
}

// appliedRows are the history's rows as migrate reads them.
func appliedRows(rows []postgres.HistoryRow) []migrate.Applied {
	out := make([]migrate.Applied, len(rows))
	for i, r := range rows {
		out[i] = migrate.Applied{Version: r.Version, Name: r.Name, Checksum: r.Checksum, How: migrate.How(r.How),
			AppliedAt: r.AppliedAt, Duration: r.Duration, OperationID: r.OperationID, AppliedBy: r.AppliedBy}
	}
	return out
}

// migrationHolds are the uncertainties of resource's runs the history
// cannot show (see observeMigration): the unresolved run of st, then the
// dirty run, if any.
func migrationHolds(ctx context.Context, conn *pgx.Conn, resource, coordinationDigest string, st api.PtahMigrationStatus,
	history []migrate.Applied) ([]migrate.Hold, error) {
	var holds []migrate.Hold
	if u := st.UnresolvedRun; u != nil {
		vs, err := heldVersions(ctx, conn, u.OperationID, history)
		if err != nil {
			return nil, err
		}
		holds = append(holds, migrate.Hold{Kind: migrate.Unresolved, OperationID: u.OperationID, Versions: vs})
	}
	runs, err := postgres.ListRuns(ctx, conn, resource)
	if err != nil || len(runs) == 0 {
		return holds, err
	}
	newest := runs[len(runs)-1]
	if !newest.Unfinished() || recordedRuns(st, history)[newest.OperationID] {
		return holds, nil
	}
	may, err := postgres.WriterMayStillWrite(ctx, conn, newest.OperationID, coordinationDigest)
	if err != nil || may {
		return holds, err
	}
	vs, err := heldVersions(ctx, conn, newest.OperationID, history)
	if err != nil {
		return nil, err
	}
	return append(holds, migrate.Hold{Kind: migrate.Dirty, OperationID: newest.OperationID, Versions: vs}), nil
}

// recordedRuns are the operations a record stands for: st's unresolved,
// active, last and resolved runs, and the runs a person settled by
// marking versions of them applied.
func recordedRuns(st api.PtahMigrationStatus, history []migrate.Applied) map[string]bool {
	ids := map[string]bool{}
	if u := st.UnresolvedRun; u != nil {
		ids[u.OperationID] = true
	}
	if op := st.ActiveOperation; op != nil {
		ids[op.ID] = true
	}
	if r := st.LastRun; r != nil {
		ids[r.OperationID] = true
	}
	if r := st.ResolvedRun; r != nil {
		ids[r.OperationID] = true
	}
	for _, row := range history {
		if row.How == migrate.HowMarked && row.OperationID != "" {
			ids[row.OperationID] = true
		}
	}
	return ids
}

// heldVersions are the versions the journal shows operationID started
// and the history lacks, in the order they ran: those the run may have
// applied, in whole or in part. A run the journal lacks (it never
// started, or its record is gone) has none.
func heldVersions(ctx context.Context, conn *pgx.Conn, operationID string, history []migrate.Applied) ([]string, error) {
	run, err := postgres.ReadRun(ctx, conn, operationID)
	if errors.Is(err, postgres.ErrRunNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	recorded := map[string]bool{}
	for _, row := range history {
		recorded[canonical(row.Version)] = true
	}
	var out []string
	for _, s := range run.Steps {
		if s.Version != "" && !recorded[canonical(s.Version)] && !slices.Contains(out, s.Version) {
			out = append(out, s.Version)
		}
	}
	return out, nil
}

// canonical is a version's canonical form, or the text of one that does
// not parse (a row written by hand).
func canonical(version string) string {
	if v, err := migrate.ParseVersion(version); err == nil {
		return v.Canonical()
	}
	return version
}

// historyMark is the unresolved mark of the history fingerprint (see
// observeMigration).
func historyMark(holds []migrate.Hold) string {
	ids := make([]string, len(holds))
	for i, h := range holds {
		ids[i] = h.OperationID
	}
	return strings.Join(ids, " ")
}

// historySummary counts the rows and names the newest version (in version
// order; a history of versions none of which parses names the last by
// text).
func historySummary(rows []migrate.Applied, fp string) api.HistorySummary {
	s := api.HistorySummary{Applied: len(rows), Fingerprint: fp}
	var newest migrate.Version
	for _, r := range rows {
		v, err := migrate.ParseVersion(r.Version)
		switch {
		case err == nil && (newest.IsZero() || v.Compare(newest) > 0):
			newest, s.LastApplied = v, r.Version
		case err != nil && newest.IsZero() && r.Version > s.LastApplied:
			s.LastApplied = r.Version
		}
	}
	return s
}

// migrationReason is the status reason of a blocking verdict.
func migrationReason(k migrate.Kind) string {
	switch k {
	case migrate.Unresolved:
		return api.ReasonUnresolvedRun
	case migrate.Dirty:
		return api.ReasonHistoryDirty
	case migrate.Modified:
		return api.ReasonHistoryModified
	case migrate.Ahead:
		return api.ReasonHistoryAhead
	case migrate.OutOfOrder:
		return api.ReasonOutOfOrder
	}
	return string(k)
}

// migrationExecPlan is what the writer executes for the stored plan spec
// of res: one phase per version, in the plan's order, each running its
// source file's statements (as the SQL lexer split them), in a
// transaction of its own or, for a file marked no-transaction, one by one
// outside any, and recording its history row when it completes (version
// and name as the plan has them, the file's checksum, HowRun, applied by
// approver; "" lets the database role stand). A baseline plan runs no
// statement: one phase of none records every version's row as
// HowBaseline, in one transaction.
//
// Each version is matched to a file of the source by version (its
// numeric value) and checksum: a version the source lacks, a file whose
// checksum or transaction mode is not the plan's, a duplicate version, a
// plan of no versions or without a valid lock timeout is an error, every
// problem named at once, and there is nothing to execute.
//
// The plan's history precondition (Plan.History.Expect, which the writer
// asks just before the first statement, under the lease) recomputes the
// fingerprint of the history the writer reads, with no unresolved mark (a
// plan is never published, so never run, while one stands), and refuses
// unless it is the spec's HistoryFingerprint: the error names both, and
// the versions that differ from the history the plan was selected
// against (see historyDiff).
func migrationExecPlan(res Resource, spec api.PtahMigrationPlanSpec, approver string) (*postgres.Plan, error) {
	name := res.Migration.Name
	if res.Source == nil {
		return nil, fmt.Errorf("executing a plan of %s: the migration source cannot be read: %w", name, res.SourceErr)
	}
	var problems []error
	if len(spec.Versions) == 0 {
		problems = append(problems, errors.New("it names no version"))
	}
	lockTimeout, err := time.ParseDuration(spec.LockTimeout)
	if err != nil || lockTimeout <= 0 {
		problems = append(problems, fmt.Errorf("its lock timeout %q is not a positive duration", spec.LockTimeout))
	}
	byVersion := map[string]*migrate.File{}
	for _, f := range res.Source.Files {
		byVersion[f.Version.Canonical()] = f
	}
	plan := &postgres.Plan{LockTimeout: lockTimeout, History: &postgres.PlanHistory{Resource: res.storeResource()}}
	plan.LockAttempt, plan.StatementTimeout = statementLimits(spec.LockAttemptTimeout, spec.StatementTimeout)
	seen := map[string]string{}
	for _, v := range spec.Versions {
		f, err := planFile(byVersion, seen, v)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		row := &postgres.HistoryRow{Version: v.Version, Name: v.Name, Checksum: f.Checksum, How: postgres.HowRun, AppliedBy: approver}
		if spec.Baseline {
			// Recorded, not run: the target already has what the files
			// build (the baseline check compared them). One phase records
			// every version, all or none.
			row.How = postgres.HowBaseline
			if len(plan.Phases) == 0 {
				plan.Phases = append(plan.Phases, postgres.Phase{Reason: "baseline", History: row})
			} else {
				plan.Phases[0].Also = append(plan.Phases[0].Also, *row)
			}
			continue
		}
		for _, s := range f.Statements {
			plan.Statements = append(plan.Statements, postgres.Statement{SQL: s.SQL})
		}
		plan.Phases = append(plan.Phases, postgres.Phase{Statements: len(f.Statements), NoTransaction: f.NoTransaction, Reason: f.Path,
			History: row})
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("plan of %s cannot be executed, and nothing of it runs: %w", name, errors.Join(problems...))
	}
	first, _ := migrate.ParseVersion(spec.Versions[0].Version) // planFile parsed it
	var before []migrate.Applied
	for _, f := range res.Source.Files {
		if f.Version.Compare(first) < 0 {
			before = append(before, migrate.Applied{Version: f.Version.String(), Name: f.Name, Checksum: f.Checksum})
		}
	}
	plan.History.Expect = expectHistory(res.storeResource(), spec.HistoryFingerprint, before)
	return plan, nil
}

// planFile is the source file of the plan's version v (seen: the
// versions already matched, canonical -> as written).
func planFile(byVersion map[string]*migrate.File, seen map[string]string, v api.MigrationVersion) (*migrate.File, error) {
	pv, err := migrate.ParseVersion(v.Version)
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", v.Version, err)
	}
	if prev, dup := seen[pv.Canonical()]; dup {
		return nil, fmt.Errorf("version %s: named twice (also as %s)", v.Version, prev)
	}
	seen[pv.Canonical()] = v.Version
	f := byVersion[pv.Canonical()]
	switch {
	case f == nil:
		return nil, fmt.Errorf("version %s (%s): the source has no file of this version", v.Version, v.Name)
	case f.Checksum != v.Checksum:
		return nil, fmt.Errorf("version %s: %s has checksum %s, and the plan was made from checksum %s", v.Version, f.Path, f.Checksum, v.Checksum)
	case f.NoTransaction != v.NoTransaction:
		return nil, fmt.Errorf("version %s: %s runs %s, and the plan says %s", v.Version, f.Path, txMode(f.NoTransaction), txMode(v.NoTransaction))
	}
	return f, nil
}

func txMode(noTx bool) string {
	if noTx {
		return "without a transaction"
	}
	return "in a transaction"
}

// expectHistory is a plan's history precondition: the history the writer
// reads must fingerprint to want. before is the history the plan was
// selected against as the source tells it (its files older than the
// plan's first version, see historyDiff).
func expectHistory(resource, want string, before []migrate.Applied) func([]postgres.HistoryRow) error {
	return func(rows []postgres.HistoryRow) error {
		now := appliedRows(rows)
		got := migrate.HistoryFingerprint(now, "")
		if got == want {
			return nil
		}
		return fmt.Errorf("the history of %s fingerprints to %s, and the plan was selected against %s: %s",
			resource, got, want, historyDiff(before, want, now))
	}
}

// historyDiff names the versions in which the history now differs from
// the one a plan was selected against. That history is not stored, only
// its fingerprint; but a plan is published only when the history matched
// the source exactly up to the plan's first version, so it was the
// source's files before that version, unless the source changed since:
// then the history's versions are listed as they are now.
func historyDiff(before []migrate.Applied, want string, now []migrate.Applied) string {
	if migrate.HistoryFingerprint(before, "") != want {
		versions := make([]string, len(now))
		for i, r := range now {
			versions[i] = r.Version
		}
		if len(versions) == 0 {
			return "the history is now empty (the source changed since, so the versions that differ cannot be named)"
		}
		return fmt.Sprintf("the history now holds %s (the source changed since, so the versions that differ cannot be named)",
			strings.Join(versions, ", "))
	}
	was := map[string]migrate.Applied{}
	for _, r := range before {
		was[canonical(r.Version)] = r
	}
	var diffs []string
	for _, r := range now {
		old, ok := was[canonical(r.Version)]
		delete(was, canonical(r.Version))
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("version %s was recorded since (%s%s)", r.Version, r.How, byWhom(r)))
		case old.Checksum != r.Checksum:
			diffs = append(diffs, fmt.Sprintf("version %s is recorded with checksum %s, and was with %s", r.Version, r.Checksum, old.Checksum))
		case old.Version != r.Version:
			diffs = append(diffs, fmt.Sprintf("version %s is recorded as %s", old.Version, r.Version))
		}
	}
	for _, r := range before {
		if _, gone := was[canonical(r.Version)]; gone {
			diffs = append(diffs, fmt.Sprintf("version %s is no longer recorded", r.Version))
		}
	}
	if len(diffs) == 0 {
		return "the same versions, recorded differently"
	}
	return strings.Join(diffs, "; ")
}

func byWhom(r migrate.Applied) string {
	var parts []string
	if r.AppliedBy != "" {
		parts = append(parts, "by "+r.AppliedBy)
	}
	if r.OperationID != "" {
		parts = append(parts, "operation "+r.OperationID)
	}
	if len(parts) == 0 {
		return ""
	}
	return ", " + strings.Join(parts, ", ")
}

// planFileSpan is one file of an executor plan: its version and its
// statements, steps from+1 to from+n of the plan (1-based).
type planFileSpan struct {
	version  string
	from, n  int
	noTx     bool
	recorded bool // the phase records a history row
	// also are the further versions a baseline phase records with version.
	also []string
}

func planFiles(plan *postgres.Plan) []planFileSpan {
	if plan == nil {
		return nil
	}
	var out []planFileSpan
	from := 0
	for _, ph := range plan.Phases {
		f := planFileSpan{from: from, n: ph.Statements, noTx: ph.NoTransaction && ph.Statements > 0}
		if ph.History != nil {
			f.version, f.recorded = ph.History.Version, true
			for _, h := range ph.Also {
				f.also = append(f.also, h.Version)
			}
		}
		out = append(out, f)
		from += ph.Statements
	}
	return out
}

func spanVersions(files []planFileSpan) []string {
	var out []string
	for _, f := range files {
		if f.recorded {
			out = append(out, f.version)
			out = append(out, f.also...)
		}
	}
	return out
}

// journalCommitted counts the plan's leading files whose every statement
// the journal shows committed (all of them when it records the run
// succeeded). Files commit in plan order, so none after them did; a file
// of a transactional phase commits whole with its history row, and a
// no-transaction file's history row commits with its last statement's
// completion. run nil (not read) counts none.
func journalCommitted(run *postgres.Run, files []planFileSpan) int {
	if run == nil {
		return 0
	}
	if run.Committed() {
		return len(files)
	}
	for i, f := range files {
		if f.n == 0 || committedSteps(run, f) < f.n {
			return i
		}
	}
	return len(files)
}

// committedSteps counts f's statements the journal shows committed.
func committedSteps(run *postgres.Run, f planFileSpan) int {
	n := 0
	for _, s := range run.Steps {
		if s.Step > f.from && s.Step <= f.from+f.n && s.CommittedAt != nil {
			n++
		}
	}
	return n
}

// classifyMigration turns how a migration plan's execution ended (err,
// from postgres.Writer.Execute on plan) into the run the engine accounts
// for (engine.AccountMigration). run is the run's journal, read after
// Execute returned (postgres.ReadRun; nil when it could not be read);
// Versions come from it when it is there.
//
// How each case is decided, in this order:
//
//   - err nil, or the journal records the run succeeded (its success
//     commits in the plan's last transaction, so it is exact, whatever
//     err says, e.g. a lost answer to a COMMIT that landed): RunSucceeded,
//     every version of the plan.
//   - ErrNotStarted (with ErrHistoryMoved: the history was not the one
//     the plan was selected against): RunFailed, no version; nothing ran.
//   - ErrOutcomeUnknown (the session was lost during a COMMIT, or while a
//     statement run without a transaction was in flight): RunUncertain;
//     Partial when the journal shows a committed statement; Versions the
//     files it shows committed.
//   - a *postgres.StatementError (PostgreSQL refused a statement): the
//     files before its phase committed, and the journal must show exactly
//     those (else RunUncertain, the evidence disagreeing). A statement of
//     a no-transaction file after the file's first: RunUncertain, Partial
//     (the statements before it in the file committed one by one, the
//     rest did not run: the file stopped part way). Otherwise nothing of
//     the file committed (its transaction rolled back, or its first
//     statement, run without one, was refused): RunFailed, with the files
//     before it as Versions, and Failure naming its version and the
//     statement's position in the file, from 1.
//   - ErrPlanFailed otherwise (a failure around the statements, before
//     anything committed): RunFailed, no version, Failure naming the
//     first file at no statement (0); RunUncertain if the journal shows a
//     statement committed after all.
//   - ErrPartiallyApplied otherwise (a failure around the statements,
//     after files committed), from the journal: the files it shows
//     committed are Versions, and the first file after them is where the
//     run stopped. RunUncertain, Partial, when that file has statements
//     committed (only a no-transaction file commits part of itself); or
//     when the last committed file runs without a transaction and the
//     error is not the lease lost or the deadline passed (which stop a
//     run before a statement starts): the journal cannot tell a failure
//     to record that file's completion (its statements committed, its
//     history row perhaps not) from one before the next file began; or
//     when the journal is missing or shows nothing committed. Otherwise
//     RunFailed: the file it stopped at did not start, or rolled back,
//     and Failure names it at no statement (0).
//   - anything else (ErrAlreadyRun: another attempt under this operation
//     ID ran, and its outcome is not this call's to know): RunUncertain,
//     Partial when the journal shows a committed statement.
//
// Message is err's text without SQL (statusMessage). Writer is the
// session the journal names.
// MayStillWrite is left false: whether an uncertain run's writer may
// still write is the database's answer (postgres.WriterMayStillWrite),
// which the caller asks.
func classifyMigration(err error, run *postgres.Run, plan *postgres.Plan) engine.MigrationRun {
	files := planFiles(plan)
	out := engine.MigrationRun{Writer: writerSession(run)}
	if err != nil {
		out.Message = statusMessage(err)
	}
	uncertain := func(partial bool) engine.MigrationRun {
		out.Result, out.Partial = engine.RunUncertain, partial
		out.Versions = spanVersions(files[:journalCommitted(run, files)])
		return out
	}
	failed := func(committed int, at *api.RunFailure) engine.MigrationRun {
		out.Result, out.Versions, out.Failure = engine.RunFailed, spanVersions(files[:committed]), at
		return out
	}
	var se *postgres.StatementError
	switch {
	case err == nil || run != nil && run.Committed():
		out.Result, out.Versions = engine.RunSucceeded, spanVersions(files)
		return out
	case errors.Is(err, postgres.ErrNotStarted):
		return failed(0, nil)
	case errors.Is(err, postgres.ErrOutcomeUnknown):
		return uncertain(anyCommitted(run))
	case errors.As(err, &se):
		i := se.Phase - 1
		if i < 0 || i >= len(files) || se.Step <= files[i].from || se.Step > files[i].from+files[i].n ||
			run != nil && journalCommitted(run, files) != i {
			return uncertain(anyCommitted(run) || se.Committed > 0)
		}
		f, n := files[i], se.Step-files[i].from
		if se.NoTransaction && n > 1 {
			return uncertain(true)
		}
		return failed(i, &api.RunFailure{Version: f.version, Statement: n})
	case errors.Is(err, postgres.ErrPlanFailed):
		if anyCommitted(run) || len(files) == 0 {
			return uncertain(anyCommitted(run))
		}
		return failed(0, &api.RunFailure{Version: files[0].version})
	case errors.Is(err, postgres.ErrPartiallyApplied):
		k := journalCommitted(run, files)
		switch {
		case run == nil, k == 0, k == len(files), committedSteps(run, files[k]) > 0,
			files[k-1].noTx && !errors.Is(err, postgres.ErrLeaseLost) && !errors.Is(err, postgres.ErrDeadlinePassed):
			return uncertain(true)
		}
		return failed(k, &api.RunFailure{Version: files[k].version})
	}
	return uncertain(anyCommitted(run))
}

func anyCommitted(run *postgres.Run) bool { return run != nil && run.AnyCommitted() }

// writerSession is the session the journal names for the run, nil when
// it names none.
func writerSession(run *postgres.Run) *api.WriterSession {
	if run == nil || run.Writer.PID == 0 {
		return nil
	}
	return &api.WriterSession{PID: run.Writer.PID, BackendStart: api.NewTime(run.Writer.BackendStart)}
}
