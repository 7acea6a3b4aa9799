package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// What apply and status show of a PtahMigration's runs: the versions a run
// applied, where a failed one stopped, and a run only a person can settle.
// Status output never shows SQL: a run's recorded message may end with the
// failed statement, and only its first line is shown (resolve-run and the
// journal have the statements).

// inspectMigration is ptah status for a PtahMigration: what runner.Inspect
// reads of it, and, for an unresolved run, whether its writer may still
// write. The writer's SQL is left out: hand-written SQL stays out of
// status (resolve-run shows it).
func inspectMigration(ctx context.Context, r *runner.Runner, in runner.Resource) (statusItem, error) {
	rep, err := r.Inspect(ctx, in)
	if err != nil {
		return statusItem{}, err
	}
	item := storedItem(rep)
	if st := item.Migration; st != nil {
		if u := st.UnresolvedRun; u != nil {
			may, err := postgres.WriterMayStillWrite(ctx, r.Target, u.OperationID, u.CoordinationDigest)
			if err != nil {
				return item, err
			}
			item.WriterMayStillWrite = &may
		}
	}
	item.Lease = leaseItem(rep.Lease, rep.LeaseWriterAlive, rep.Writer, rep.Run)
	if item.Lease != nil && item.Lease.Writer != nil {
		item.Lease.Writer.Statement = ""
	}
	return item, nil
}

func at(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// lastRunText says how a migration's last run ended, without SQL.
func lastRunText(lr *api.AppliedPlan) string {
	switch lr.Outcome {
	case api.OutcomeSucceeded:
		return fmt.Sprintf("applied %s (operation %s, plan %s, %s)", versionsNoun(lr.Versions), lr.OperationID, lr.Plan.Name, at(lr.FinishedAt.Time))
	case api.OutcomeFailed:
		var b strings.Builder
		if f := lr.Failure; f != nil {
			fmt.Fprintf(&b, "failed: %s", failureText(f))
		} else {
			b.WriteString("failed before any file ran")
		}
		if msg := postgresError(lr.Message); msg != "" {
			b.WriteString(": " + msg)
		}
		if len(lr.Versions) > 0 {
			fmt.Fprintf(&b, "; committed before it, and applied: %s", versionList(lr.Versions))
		} else {
			b.WriteString("; nothing of the plan was applied")
		}
		fmt.Fprintf(&b, " (operation %s, plan %s, %s)", lr.OperationID, lr.Plan.Name, at(lr.FinishedAt.Time))
		return b.String()
	}
	return fmt.Sprintf("%s (operation %s, plan %s, %s)", lr.Outcome, lr.OperationID, lr.Plan.Name, at(lr.FinishedAt.Time))
}

// postgresError is what PostgreSQL said, from a failed run's recorded
// message: that message numbers the statement in the whole plan (and may
// end with its SQL), where a person reads the failure by file and by
// statement in it (failureText).
func postgresError(msg string) string {
	head := messageHead(msg)
	if i := strings.Index(head, "ERROR: "); i >= 0 {
		return head[i:]
	}
	if _, rest, ok := strings.Cut(head, ": "); ok && strings.HasPrefix(head, "executing run ") {
		head = rest
	}
	// "statement 2/4 failed in transaction 2/3, ...: why"
	if _, rest, ok := strings.Cut(head, ": "); ok && strings.HasPrefix(head, "statement ") {
		head = rest
	}
	return head
}

// failureText locates where a failed run stopped.
func failureText(f *api.RunFailure) string {
	if f.Statement == 0 {
		return fmt.Sprintf("version %s rolled back (not at one of its statements: at its commit, or before it began)", f.Version)
	}
	return fmt.Sprintf("version %s failed at its statement %d and rolled back", f.Version, f.Statement)
}

func versionsNoun(vs []string) string {
	if len(vs) == 1 {
		return "version " + vs[0]
	}
	return "versions " + versionList(vs)
}

// unresolvedText describes an unresolved run in one line.
func unresolvedText(u *api.UnresolvedRun) string {
	return fmt.Sprintf("operation %s of plan %s (uid %s): outcome %s, reported by %s at %s", u.OperationID, u.Plan.Name, u.Plan.UID,
		u.Outcome, strings.ToLower(u.ReportedBy), at(u.RecordedAt.Time))
}

// unresolvedWriterText says where the unresolved run's writer is.
func unresolvedWriterText(u *api.UnresolvedRun, mayStillWrite *bool) string {
	who := "no session recorded (the run was dispatched and never reported one)"
	if w := u.Writer; w != nil {
		who = fmt.Sprintf("session pid %d started %s", w.PID, at(w.BackendStart.Time))
	}
	s := fmt.Sprintf("%s, deadline %s", who, at(u.Deadline.Time))
	switch {
	case mayStillWrite == nil:
	case *mayStillWrite:
		s += "; it may still be writing"
	default:
		s += "; it can no longer write"
	}
	return s
}

// writeMigrationStatus is ptah status for a PtahMigration.
func writeMigrationStatus(b *strings.Builder, st styles, it statusItem, row func(label, value string)) {
	s := it.Migration
	fmt.Fprintf(b, "%s  %s", st.header.Render(fmt.Sprintf("%s %q", it.Resource.Kind, it.Resource.Name)), phaseText(st, s.Phase))
	if s.Reason != "" && s.Reason != string(s.Phase) {
		fmt.Fprintf(b, " (%s)", s.Reason)
	}
	b.WriteString("\n")
	for _, l := range strings.Split(strings.TrimSpace(firstLines(s.Message)), "\n") {
		if l != "" {
			b.WriteString("  " + l + "\n")
		}
	}
	if s.Plan != nil {
		row("current plan", fmt.Sprintf("%s (uid %s)", s.Plan.Name, s.Plan.UID))
	} else {
		row("current plan", "none")
	}
	// The pass's reading, which a failed run does not refresh: the last
	// run's versions say what it added since.
	row("history (last read)", historyText(s.History))
	if lr := s.LastRun; lr != nil {
		row("last run", lastRunText(lr))
	} else {
		row("last run", "none")
	}
	if u := s.UnresolvedRun; u != nil {
		row("unresolved run", unresolvedText(u))
		row("its writer", unresolvedWriterText(u, it.WriterMayStillWrite))
		row("settle it", "ptah resolve-run "+it.Resource.Name+" shows the evidence")
	}
	if rr := s.ResolvedRun; rr != nil {
		row("resolved run", fmt.Sprintf("operation %s, by %s at %s (acknowledgment %s)", rr.OperationID, rr.By, at(rr.At.Time), rr.Acknowledgment.Name))
	}
	writeRunStateRows(s.RunState, it, row)
}

// firstLines keeps a status message's lines but drops what follows a
// failed statement's report: a recorded message may end with its SQL.
func firstLines(msg string) string {
	if strings.Contains(msg, "statement ") && strings.Contains(msg, " failed") {
		return messageHead(msg)
	}
	return msg
}

// writeMigrationApplied is ptah apply's summary of a PtahMigration.
func writeMigrationApplied(b *strings.Builder, st styles, r applied) {
	m := r.Migration
	fmt.Fprintf(b, "%s: %s", st.header.Render(r.Resource.Ref()), phaseText(st, m.Phase))
	lr := m.LastRun
	ran := lr != nil && slices.Contains(r.Dispatched, lr.OperationID)
	switch {
	case ran && lr.Outcome == api.OutcomeSucceeded:
		fmt.Fprintf(b, " Applied %s (plan %s, operation %s).", versionsNoun(lr.Versions), lr.Plan.Name, lr.OperationID)
	case ran && lr.Outcome == api.OutcomeFailed:
		b.WriteString(" The run " + lastRunText(lr) + ".")
	}
	if msg := firstLines(m.Message); msg != "" && m.Phase != api.PhaseInSync && !(ran && m.Phase == api.PhaseFailed) {
		b.WriteString(" " + strings.ReplaceAll(msg, "\n", "\n  "))
	}
	b.WriteString("\n")
	if u := m.UnresolvedRun; u != nil {
		fmt.Fprintf(b, "  unresolved run: %s\n", unresolvedText(u))
		fmt.Fprintf(b, "  its writer: %s\n", unresolvedWriterText(u, nil))
	}
}

// migrationInterrupted says what an interrupted apply did to a
// PtahMigration, and what comes next.
func migrationInterrupted(cause error, res *config.Resource, out runner.Result) error {
	st := out.Migration.Status
	lr := st.LastRun
	ran := lr != nil && slices.Contains(out.Dispatched, lr.OperationID)
	var what, next string
	switch u := st.UnresolvedRun; {
	case u != nil && slices.Contains(out.Dispatched, u.OperationID):
		what = fmt.Sprintf("the outcome of run %s of plan %s is not known (%s)", u.OperationID, u.Plan.Name, u.Outcome)
		next = fmt.Sprintf("nothing runs until a person settles it: ptah resolve-run %s shows the evidence", res.Name())
	case st.ActiveOperation != nil && st.ActiveOperation.DispatchedAt != nil:
		op := st.ActiveOperation
		what = fmt.Sprintf("run %s of plan %s was not accounted for", op.ID, op.Plan.Name)
		next = fmt.Sprintf("the next ptah apply accounts for it from the journal once its writer session has ended; what the journal cannot settle waits for ptah resolve-run %s", res.Name())
	case ran && lr.Outcome == api.OutcomeFailed:
		what = "the run " + lastRunText(lr)
		next = afterSpentApproval(res)
	case ran:
		what = fmt.Sprintf("plan %s had already committed: %s applied", lr.Plan.Name, versionsNoun(lr.Versions))
		next = "ptah status shows where it stands"
	default:
		what = "nothing ran"
		next = "ptah apply takes it up again (an approval given stands)"
	}
	return fmt.Errorf("interrupted (%w): %s: %s; %s", cause, res.Ref(), what, next)
}
