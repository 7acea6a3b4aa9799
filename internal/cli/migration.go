package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ptah-run/ptah/internal/migrate"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// This file holds what the governed commands show of a PtahMigration: its
// plan (the pending files, each with how it runs), the read-only preview
// behind plan --no-publish, and the small vocabulary the plan, apply,
// status and resolve-run outputs share.

// migrationPlan is a PtahMigration's plan, ready to render.
type migrationPlan struct {
	// Status is the migration's status after the pass; nil with
	// --no-publish, unless the preview found the history blocking (a
	// status of that verdict alone).
	Status *api.PtahMigrationStatus
	// Versions are the pending files, in the order they run: the
	// published plan's, or the preview's.
	Versions []api.MigrationVersion
	// History is the reading of the history the versions were selected
	// against; HistoryFingerprint is the plan's binding of it ("" when
	// nothing was published).
	History            *api.HistorySummary
	HistoryFingerprint string
	LockTimeout        string
	// Baseline: the versions are recorded as already applied, and none
	// of them runs (ptah plan --baseline).
	Baseline bool
	// Source is the directory read, for the file names and -o sql.
	Source *migrate.Source
}

// history is the reading the plan shows: the preview's, or the status's.
func (m *migrationPlan) history() *api.HistorySummary {
	if m.History != nil {
		return m.History
	}
	if m.Status != nil {
		return m.Status.History
	}
	return nil
}

// file is the source file of version v, nil when the source lacks it.
func (m *migrationPlan) file(v api.MigrationVersion) *migrate.File {
	return sourceFile(m.Source, v.Version)
}

func sourceFile(src *migrate.Source, version string) *migrate.File {
	if src == nil {
		return nil
	}
	want, err := migrate.ParseVersion(version)
	if err != nil {
		return nil
	}
	for _, f := range src.Files {
		if f.Version.Compare(want) == 0 {
			return f
		}
	}
	return nil
}

// txMode is how a file runs, in the words the plan shows.
func txMode(noTransaction bool) string {
	if noTransaction {
		return "no transaction"
	}
	return "transaction"
}

// shortSum abbreviates a checksum or fingerprint ("sha256:" and 12 hex
// digits) for tables a person reads; -o json has them whole.
func shortSum(s string) string {
	algo, hex, ok := strings.Cut(s, ":")
	if !ok || len(hex) <= 12 {
		return s
	}
	return algo + ":" + hex[:12]
}

// historyText summarizes a reading of the history in one line.
func historyText(h *api.HistorySummary) string {
	if h == nil {
		return "not read yet"
	}
	if h.Applied == 0 {
		return fmt.Sprintf("empty (fingerprint %s)", shortSum(h.Fingerprint))
	}
	return fmt.Sprintf("%s applied, last %s (fingerprint %s)", plural(h.Applied, "version"), h.LastApplied, shortSum(h.Fingerprint))
}

// previewMigration is plan --no-publish for a PtahMigration: the history
// read and compared with the source, with what a pass would hold it by (an
// unresolved run, or one the journal shows unfinished that no record
// stands for), and nothing recorded.
func previewMigration(ctx context.Context, r *runner.Runner, in runner.Resource) (*migrationPlan, error) {
	obs, _, err := r.PreviewMigration(ctx, in)
	if err != nil {
		return nil, err
	}
	summary := obs.History
	mp := &migrationPlan{History: &summary, Source: in.Source, LockTimeout: in.Migration.Spec.Policy.LockTimeout}
	if obs.Blocked {
		mp.Status = &api.PtahMigrationStatus{History: &summary,
			RunState: api.RunState{Phase: api.PhaseBlocked, Reason: obs.Reason, Message: obs.Message}}
		return mp, nil
	}
	mp.Versions = obs.Pending
	return mp, nil
}

// storedMigrationStatus reads the migration's recorded status (runner's
// Inspect, which fences the store first); zero when nothing is recorded.
func storedMigrationStatus(ctx context.Context, r *runner.Runner, in runner.Resource) (api.PtahMigrationStatus, error) {
	rep, err := r.Inspect(ctx, in)
	if err != nil || rep.Migration == nil {
		return api.PtahMigrationStatus{}, err
	}
	return rep.Migration.Status, nil
}

// versionList names versions for a sentence: "1, 2 and 3".
func versionList(vs []string) string {
	switch len(vs) {
	case 0:
		return "none"
	case 1:
		return vs[0]
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " and " + vs[len(vs)-1]
}

// messageHead is the first line of a message, for one-line summaries (a
// status never carries a statement's SQL; resolve-run shows it from the
// journal).
func messageHead(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// numberWidth is how wide the numbers 1..n print.
func numberWidth(n int) int { return len(strconv.Itoa(n)) }

// The JSON of a migration's plan: the pending files in order, each with
// how it runs, and the history they were selected against.
type (
	jsonMigrationPlanSpec struct {
		Versions    []jsonMigrationVersion `json:"versions"`
		LockTimeout string                 `json:"lockTimeout"`
		// HistoryFingerprint is the plan's binding of the history;
		// absent when nothing was published.
		HistoryFingerprint string `json:"historyFingerprint,omitempty"`
		Fingerprint        string `json:"fingerprint,omitempty"`
		// Baseline: the versions are recorded as already applied, and
		// none of them runs.
		Baseline bool `json:"baseline,omitempty"`
	}
	jsonMigrationVersion struct {
		Version  string `json:"version"`
		Name     string `json:"name"`
		File     string `json:"file,omitempty"`
		Checksum string `json:"checksum"`
		// NoTransaction: the file runs outside a transaction, statement
		// by statement.
		NoTransaction bool `json:"noTransaction"`
	}
)

func migrationJSONItem(r planResult) jsonItem {
	m := r.Migration
	spec := jsonMigrationPlanSpec{Versions: []jsonMigrationVersion{}, LockTimeout: m.LockTimeout, HistoryFingerprint: m.HistoryFingerprint,
		Baseline: m.Baseline}
	for _, v := range m.Versions {
		jv := jsonMigrationVersion{Version: v.Version, Name: v.Name, Checksum: v.Checksum, NoTransaction: v.NoTransaction}
		if f := m.file(v); f != nil {
			jv.File = f.Path
		}
		spec.Versions = append(spec.Versions, jv)
	}
	item := jsonItem{Resource: refOf(r.Resource), Changes: r.changes(), History: m.history()}
	if p := r.Published; p != nil {
		item.Plan.Metadata = &jsonMeta{Name: p.Name, UID: p.UID}
		spec.Fingerprint = p.Fingerprint
	}
	item.Plan.Spec = spec
	if st := r.state(); st != nil {
		item.Phase, item.Reason, item.Message = st.Phase, st.Reason, st.Message
	}
	return item
}

// writeMigrationSQL writes the pending files as one script, for review:
// each transactional file between BEGIN and COMMIT, each no-transaction
// file's statements as they are. Run by hand it records no history; ptah
// apply does.
func writeMigrationSQL(b *strings.Builder, r planResult) {
	m := r.Migration
	if m.Baseline {
		fmt.Fprintf(b, "-- a baseline: %s recorded as already applied; nothing runs\n", plural(len(m.Versions), "version"))
		return
	}
	if len(m.Versions) > 0 {
		b.WriteString("-- the pending files, in order; run this way they are not recorded in ptah.migration_history (ptah apply records each)\n")
	}
	for _, v := range m.Versions {
		f := m.file(v)
		if f == nil {
			fmt.Fprintf(b, "\n-- version %s (%s): not in the source\n", v.Version, v.Name)
			continue
		}
		fmt.Fprintf(b, "\n-- version %s: %s (%s, %s)\n", v.Version, f.Path, shortSum(v.Checksum), txMode(v.NoTransaction))
		if !v.NoTransaction {
			b.WriteString("BEGIN;\n")
		}
		for _, s := range f.Statements {
			b.WriteString(strings.TrimRight(s.SQL, "; \n\t") + ";\n")
		}
		if !v.NoTransaction {
			b.WriteString("COMMIT;\n")
		}
	}
}

// writeTextMigrationPlan shows a migration's plan: the pending files in
// the order they run, each with its version, name, checksum and how it
// runs; the history they were selected against; and what to do next.
func writeTextMigrationPlan(b *strings.Builder, st styles, r planResult) {
	m := r.Migration
	layout := ""
	if m.Source != nil {
		layout = ", layout " + string(m.Source.Layout)
	}
	fmt.Fprintf(b, "%s %s\n", st.header.Render(r.Resource.Ref()),
		st.dim.Render(fmt.Sprintf("(%s:%d; %s%s; lock timeout %s)", r.Resource.File, r.Resource.Line, r.Resource.SourceDir(), layout, m.LockTimeout)))
	fmt.Fprintf(b, "%s\n", st.dim.Render("history: "+historyText(m.history())))
	s := r.state()
	if r.blocked() {
		writeBlocked(b, st, s.Reason, s.Message)
		return
	}
	if !r.changes() {
		b.WriteString("\n" + st.ok.Render("No changes.") + " Every version of the source is in the history.\n")
		return
	}
	if p := r.Published; p != nil {
		b.WriteString(st.dim.Render(fmt.Sprintf("plan %s  uid %s  fingerprint %s", p.Name, p.UID, p.Fingerprint)) + "\n")
	}
	b.WriteString("\n")
	numW, verW, nameW, sumW := numberWidth(len(m.Versions)), len("version"), len("name"), len("checksum")
	for _, v := range m.Versions {
		verW, nameW, sumW = max(verW, len(v.Version)), max(nameW, len(v.Name)), max(sumW, len(shortSum(v.Checksum)))
	}
	modeW := len(txMode(true))
	b.WriteString(st.dim.Render(strings.TrimRight(fmt.Sprintf("  %*s  %-*s  %-*s  %-*s  %-*s  %s", numW, "", verW, "version", nameW, "name",
		sumW, "checksum", modeW, "runs", "file"), " ")) + "\n")
	noTx := 0
	for i, v := range m.Versions {
		mode := fmt.Sprintf("%-*s", modeW, txMode(v.NoTransaction))
		if m.Baseline {
			mode = fmt.Sprintf("%-*s", modeW, "recorded")
		} else if v.NoTransaction {
			noTx++
			mode = st.otherHazard.Render(mode)
		}
		file := ""
		if f := m.file(v); f != nil {
			file = f.Path
		}
		fmt.Fprintf(b, "%s\n", strings.TrimRight(fmt.Sprintf("  %s  %-*s  %-*s  %-*s  %s  %s", st.number.Render(fmt.Sprintf("%*d", numW, i+1)),
			verW, v.Version, nameW, v.Name, sumW, shortSum(v.Checksum), mode, file), " "))
	}
	b.WriteString("\n")
	if m.Baseline {
		b.WriteString(st.header.Render("Baseline:") + " the target was checked against what these files build, and matches; " +
			"applied, this plan records each version as already applied (how: baseline) and runs none of their statements.\n")
		b.WriteString(st.header.Render(fmt.Sprintf("Plan: a baseline of %s.", plural(len(m.Versions), "version"))) + "\n")
		if s != nil {
			writePhase(b, st, *s, r.Published)
		}
		return
	}
	if noTx > 0 {
		b.WriteString(st.header.Render("No transaction:") + " such a file runs statement by statement, each committing on its own; " +
			"if it stops part way, what committed stays, and nothing runs until a person settles the run (ptah resolve-run).\n")
	}
	summary := fmt.Sprintf("Plan: %s", plural(len(m.Versions), "version"))
	if noTx > 0 {
		summary += fmt.Sprintf(", %d without a transaction", noTx)
	}
	b.WriteString(st.header.Render(summary+".") + "\n")
	if s != nil {
		writePhase(b, st, *s, r.Published)
	}
}
