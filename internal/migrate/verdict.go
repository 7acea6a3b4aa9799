package migrate

import (
	"fmt"
	"strings"
)

// Kind is what a comparison of the source with the history concluded. Its
// value is the stable reason string shown to people and scripts.
type Kind string

// The verdicts, blocking ones in the order they are reported: a verdict's
// Kind is the first that applies, and it lists every other that does.
const (
	// UpToDate: every file is applied, and nothing blocks.
	UpToDate Kind = "UpToDate"
	// Pending: files remain to run, after every applied one.
	Pending Kind = "Pending"

	// Unresolved: status.unresolvedRun names a run whose outcome is
	// unknown; a person settles it with `ptah resolve-run`.
	Unresolved Kind = "UnresolvedRun"
	// Dirty: the run journal holds a run that started and never finished,
	// and no record (an unresolved run, or history rows) stands for it.
	Dirty Kind = "DirtyRun"
	// Modified: an applied file's contents changed since it ran.
	Modified Kind = "HistoryModified"
	// Ahead: the history holds versions the source lacks, newer than its
	// files (the database was migrated from a newer source) or among them
	// (applied files that were deleted or renamed). Missing files are
	// Ahead: either way the source cannot account for what the database
	// ran, and the remedy is the same, the source that migrated it.
	Ahead Kind = "HistoryAhead"
	// OutOfOrder: a file not yet applied is older than the newest applied
	// version; ptah runs migrations in version order only.
	OutOfOrder Kind = "OutOfOrder"
)

// blockingOrder is the order of precedence of the blocking kinds.
var blockingOrder = []Kind{Unresolved, Dirty, Modified, Ahead, OutOfOrder}

// Hold is an uncertainty the history table cannot show, read by the caller
// from the resource's status (Unresolved) or the run journal (Dirty) and
// passed to Compare.
type Hold struct {
	Kind        Kind // Unresolved or Dirty
	OperationID string
	// Versions are the versions of the run's plan that the history lacks:
	// they may have run, in whole or in part.
	Versions []string
}

// Change is an applied file whose contents are not those that ran.
type Change struct {
	Applied Applied
	File    *File
}

// Verdict is what Compare concluded. Every blocking list is filled
// whatever the Kind, so that one reading names everything to fix.
type Verdict struct {
	Kind Kind
	// Pending are the files to run, in order; empty when blocked, so that
	// nothing blocked is run by mistake.
	Pending []*File

	Holds      []Hold
	Modified   []Change
	Ahead      []Applied // in version order
	OutOfOrder []*File
}

// Compare decides, from the source and the history rows a database holds
// (in any order), which files are pending or why none may run. holds are
// the runs the history cannot show (see Hold); pass none when there are
// none. Rows and files are matched by numeric version; a file whose name
// changed but not its contents is the same migration.
func Compare(src *Source, history []Applied, holds ...Hold) Verdict {
	v := Verdict{Holds: holds}
	byVersion := map[string]*File{}
	for _, f := range src.Files {
		byVersion[f.Version.Canonical()] = f
	}
	applied := map[string]bool{}
	var newest Version
	for _, row := range sortedHistory(history) {
		ver, err := ParseVersion(row.Version)
		f := byVersion[ver.Canonical()]
		switch {
		case err != nil || f == nil:
			v.Ahead = append(v.Ahead, row)
		case f.Checksum != row.Checksum:
			v.Modified = append(v.Modified, Change{Applied: row, File: f})
		}
		if err == nil {
			applied[ver.Canonical()] = true
			newest = ver // the rows are in version order
		}
	}
	for _, f := range src.Files {
		switch {
		case applied[f.Version.Canonical()]:
		case !newest.IsZero() && f.Version.Compare(newest) < 0:
			v.OutOfOrder = append(v.OutOfOrder, f)
		default:
			v.Pending = append(v.Pending, f)
		}
	}
	v.Kind = v.decide()
	if v.Blocked() {
		v.Pending = nil
	}
	return v
}

// decide is the first blocking kind that applies, else Pending or UpToDate.
func (v Verdict) decide() Kind {
	for _, k := range blockingOrder {
		if v.has(k) {
			return k
		}
	}
	if len(v.Pending) > 0 {
		return Pending
	}
	return UpToDate
}

// has reports whether the blocking kind k applies.
func (v Verdict) has(k Kind) bool {
	switch k {
	case Unresolved, Dirty:
		for _, h := range v.Holds {
			if h.Kind == k {
				return true
			}
		}
	case Modified:
		return len(v.Modified) > 0
	case Ahead:
		return len(v.Ahead) > 0
	case OutOfOrder:
		return len(v.OutOfOrder) > 0
	}
	return false
}

// Blocked reports whether nothing may run: any verdict but UpToDate and
// Pending.
func (v Verdict) Blocked() bool { return v.Kind != UpToDate && v.Kind != Pending }

// Reason is the stable reason string of the verdict.
func (v Verdict) Reason() string { return string(v.Kind) }

// Versions are the versions concerned: the pending ones, or, when blocked,
// every version of every blocking kind, in the order they are reported.
func (v Verdict) Versions() []string {
	var out []string
	for _, f := range v.Pending {
		out = append(out, f.Version.String())
	}
	for _, h := range v.Holds {
		out = append(out, h.Versions...)
	}
	for _, c := range v.Modified {
		out = append(out, c.Applied.Version)
	}
	for _, a := range v.Ahead {
		out = append(out, a.Version)
	}
	for _, f := range v.OutOfOrder {
		out = append(out, f.Version.String())
	}
	return out
}

// Message says what the verdict is, naming versions and files, and for a
// blocking one what a person can do; one line per kind that applies.
func (v Verdict) Message() string {
	switch v.Kind {
	case UpToDate:
		return "up to date: every migration is applied"
	case Pending:
		return fmt.Sprintf("%d pending: %s", len(v.Pending), filesList(v.Pending))
	}
	var lines []string
	for _, k := range blockingOrder {
		if v.has(k) {
			lines = append(lines, v.blockingMessages(k)...)
		}
	}
	return strings.Join(lines, "\n")
}

func (v Verdict) blockingMessages(k Kind) []string {
	switch k {
	case Unresolved, Dirty:
		var out []string
		for _, h := range v.Holds {
			if h.Kind == k {
				out = append(out, holdMessage(h))
			}
		}
		return out
	case Modified:
		parts := make([]string, len(v.Modified))
		for i, c := range v.Modified {
			parts[i] = fmt.Sprintf("%s (%s: applied as %s, now %s)", c.Applied.Version, c.File.Path, short(c.Applied.Checksum), short(c.File.Checksum))
		}
		return []string{fmt.Sprintf("%s: applied files changed since they ran: %s; restore each as it was applied "+
			"(ptah never runs a file twice) and put the change in a new migration", Modified, strings.Join(parts, ", "))}
	case Ahead:
		parts := make([]string, len(v.Ahead))
		for i, a := range v.Ahead {
			parts[i] = fmt.Sprintf("%s (%s, %s)", a.Version, a.Name, a.How)
		}
		return []string{fmt.Sprintf("%s: the database has applied versions this source lacks: %s; "+
			"use the source that migrated this database, or restore the missing files", Ahead, strings.Join(parts, ", "))}
	case OutOfOrder:
		return []string{fmt.Sprintf("%s: files not yet applied are older than the newest applied version: %s; "+
			"ptah runs migrations in version order only, so give each a version after every applied one", OutOfOrder, filesList(v.OutOfOrder))}
	}
	return nil
}

func holdMessage(h Hold) string {
	var what string
	if h.Kind == Unresolved {
		what = "the outcome of run " + h.OperationID + " is unknown"
	} else {
		what = "run " + h.OperationID + " started and never finished, and nothing records its outcome"
	}
	if len(h.Versions) > 0 {
		what += fmt.Sprintf(" (versions %s may have run, in whole or in part)", strings.Join(h.Versions, ", "))
	}
	return fmt.Sprintf("%s: %s; nothing runs until a person settles it: `ptah resolve-run` shows the evidence", h.Kind, what)
}

// filesList names files as "0002 (0002_users.sql)", saying which run
// outside a transaction.
func filesList(files []*File) string {
	parts := make([]string, len(files))
	for i, f := range files {
		parts[i] = fmt.Sprintf("%s (%s)", f.Version, f.Path)
		if f.NoTransaction {
			parts[i] = fmt.Sprintf("%s (%s, no transaction)", f.Version, f.Path)
		}
	}
	return strings.Join(parts, ", ")
}

// short abbreviates a checksum for messages.
func short(checksum string) string {
	h := strings.TrimPrefix(checksum, checksumPrefix)
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}
