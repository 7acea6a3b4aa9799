package migrate

import (
	"slices"
	"strings"
	"time"

	"github.com/ptah-run/ptah/internal/fingerprint"
)

// How says how a version came to be in the history.
type How string

const (
	// HowRun: ptah ran the file.
	HowRun How = "run"
	// HowMarked: a person marked the version applied while settling an
	// uncertain run (`ptah resolve-run --mark-applied`).
	HowMarked How = "marked"
	// HowBaseline: recorded when an existing database was adopted, after
	// its schema was found equal to the files' up to that version.
	HowBaseline How = "baseline"
)

// Applied is one row of a database's migration history.
type Applied struct {
	// Version is the version as the file spelled it when it was recorded
	// (File.Version.String()). Rows and files are matched by the
	// version's numeric value, so "0002" and "2" are one version.
	Version  string
	Name     string
	Checksum string // the file's Checksum when it was recorded
	How      How

	AppliedAt   time.Time
	Duration    time.Duration
	OperationID string // the run that applied it, or the acknowledgment that marked it
	AppliedBy   string
}

// HistoryFingerprint fingerprints a reading of the history: every row's
// version and checksum, in version order (whatever order the rows were
// read in), then the operation ID of the unresolved run ("" for none). A
// plan is bound to it: any row added, removed or changed in what selects
// or blocks the pending files, or a run left unresolved, makes the plan
// stale. Names, times and how a row was recorded are left out.
//
// Field order, which must not change: rows (count), then per row version
// and checksum, then unresolved.
func HistoryFingerprint(rows []Applied, unresolved string) string {
	b := fingerprint.New("ptah.migrate/history/v1").Int("rows", int64(len(rows)))
	for _, r := range sortedHistory(rows) {
		b.String("version", r.Version).String("checksum", r.Checksum)
	}
	return b.String("unresolved", unresolved).Sum()
}

// sortedHistory returns the rows in version order. A version that does
// not parse (a row written by hand) sorts after every other, by its text.
func sortedHistory(rows []Applied) []Applied {
	out := slices.Clone(rows)
	slices.SortStableFunc(out, func(a, b Applied) int {
		va, errA := ParseVersion(a.Version)
		vb, errB := ParseVersion(b.Version)
		switch {
		case errA == nil && errB == nil:
			if c := va.Compare(vb); c != 0 {
				return c
			}
		case errA == nil:
			return -1
		case errB == nil:
			return 1
		}
		if c := strings.Compare(a.Version, b.Version); c != 0 {
			return c
		}
		return strings.Compare(a.Checksum, b.Checksum)
	})
	return out
}
