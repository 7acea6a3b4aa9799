package migrate

import (
	"slices"
	"strings"
	"testing"
)

// verdictSource: four migrations, the fourth outside a transaction.
func verdictSource(t *testing.T) *Source {
	t.Helper()
	src, err := Read(dir("1_a.sql", "2_b.sql", "3_c.sql",
		"4_d.sql=-- ptah:no-transaction\nCREATE INDEX CONCURRENTLY i ON ta (id);\n"), LayoutNative)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// ran is the history of running the source's files of these versions.
func ran(src *Source, versions ...string) []Applied {
	var rows []Applied
	for _, f := range src.Files {
		if slices.Contains(versions, f.Version.String()) {
			rows = append(rows, Applied{Version: f.Version.String(), Name: f.Name, Checksum: f.Checksum, How: HowRun})
		}
	}
	return rows
}

func TestCompare(t *testing.T) {
	t.Parallel()
	src := verdictSource(t)
	// without2 is the source with 2_b.sql deleted.
	without2, err := Read(dir("1_a.sql", "3_c.sql=CREATE TABLE tc (id int);\n"), LayoutNative)
	if err != nil {
		t.Fatal(err)
	}
	edited := func(rows []Applied, version string) []Applied {
		rows = slices.Clone(rows)
		for i := range rows {
			if rows[i].Version == version {
				rows[i].Checksum = "sha256:" + strings.Repeat("e", 64)
			}
		}
		return rows
	}
	for _, tt := range []struct {
		name     string
		src      *Source // verdictSource's when nil
		history  []Applied
		holds    []Hold
		kind     Kind
		versions []string
		pending  []string // paths
		// says: what the message must hold, each kind's line in order
		says []string
	}{
		{name: "nothing applied", history: nil, kind: Pending,
			versions: []string{"1", "2", "3", "4"}, pending: []string{"1_a.sql", "2_b.sql", "3_c.sql", "4_d.sql"},
			says: []string{"4 pending: 1 (1_a.sql), 2 (2_b.sql), 3 (3_c.sql), 4 (4_d.sql, no transaction)"}},
		{name: "some applied", history: ran(src, "1", "2"), kind: Pending,
			versions: []string{"3", "4"}, pending: []string{"3_c.sql", "4_d.sql"}, says: []string{"2 pending: 3 (3_c.sql)"}},
		{name: "history read in another order", history: reversed(ran(src, "1", "2")), kind: Pending,
			versions: []string{"3", "4"}, pending: []string{"3_c.sql", "4_d.sql"}},
		{name: "all applied", history: ran(src, "1", "2", "3", "4"), kind: UpToDate, says: []string{"up to date"}},
		{name: "a version recorded in another spelling", history: append(ran(src, "1", "2", "3"),
			Applied{Version: "0004", Checksum: src.Files[3].Checksum}), kind: UpToDate},
		{name: "renamed, same contents", history: append(ran(src, "1", "2", "3"),
			Applied{Version: "4", Name: "old_name", Checksum: src.Files[3].Checksum}), kind: UpToDate},

		{name: "an applied file edited", history: edited(ran(src, "1", "2", "3"), "2"), kind: Modified,
			versions: []string{"2"}, says: []string{"HistoryModified", "2 (2_b.sql: applied as eeeeeeeeeeee, now " + short(src.Files[1].Checksum) + ")", "new migration"}},
		{name: "history ahead of the source", history: append(ran(src, "1", "2", "3", "4"),
			Applied{Version: "5", Name: "e", How: HowRun}, Applied{Version: "6", Name: "f", How: HowMarked}), kind: Ahead,
			versions: []string{"5", "6"}, says: []string{"HistoryAhead", "5 (e, run), 6 (f, marked)"}},
		{name: "an applied file missing", src: without2, history: append(ran(src, "1", "3"), Applied{Version: "2", Name: "b", How: HowBaseline}),
			kind: Ahead, versions: []string{"2"}, says: []string{"HistoryAhead", "2 (b, baseline)"}},
		{name: "a history version that does not parse", history: append(ran(src, "1"), Applied{Version: "v2", Name: "x", How: HowRun}),
			kind: Ahead, versions: []string{"v2"}, says: []string{"v2 (x, run)"}},
		{name: "a new file older than the newest applied", history: ran(src, "1", "3"), kind: OutOfOrder,
			versions: []string{"2"}, says: []string{"OutOfOrder", "2 (2_b.sql)"}},
		{name: "several new files out of order", history: ran(src, "4"), kind: OutOfOrder,
			versions: []string{"1", "2", "3"}, says: []string{"1 (1_a.sql), 2 (2_b.sql), 3 (3_c.sql)"}},

		{name: "an unresolved run", history: ran(src, "1"), kind: Unresolved,
			holds:    []Hold{{Kind: Unresolved, OperationID: "op-7", Versions: []string{"2", "3"}}},
			versions: []string{"2", "3"}, says: []string{"UnresolvedRun", "op-7", "versions 2, 3 may have run", "ptah resolve-run"}},
		{name: "a dirty run", history: ran(src, "1"), kind: Dirty,
			holds:    []Hold{{Kind: Dirty, OperationID: "op-8"}},
			versions: nil, says: []string{"DirtyRun", "op-8 started and never finished", "ptah resolve-run"}},
		{name: "everything at once, in order of precedence",
			history: append(edited(ran(src, "1", "3"), "1"), Applied{Version: "9", Name: "z", How: HowRun}),
			holds:   []Hold{{Kind: Dirty, OperationID: "op-8"}, {Kind: Unresolved, OperationID: "op-7", Versions: []string{"4"}}},
			kind:    Unresolved, versions: []string{"4", "1", "9", "2", "4"},
			says: []string{"UnresolvedRun: the outcome of run op-7", "\nDirtyRun: run op-8", "\nHistoryModified: applied files changed since they ran: 1 (1_a.sql",
				"\nHistoryAhead: the database has applied versions this source lacks: 9 (z, run)", "\nOutOfOrder: files not yet applied are older than the newest applied version: 2 (2_b.sql), 4 (4_d.sql, no transaction)"}},
		{name: "modified before ahead", history: append(edited(ran(src, "1"), "1"), Applied{Version: "9"}), kind: Modified,
			versions: []string{"1", "9", "2", "3", "4"}, says: []string{"HistoryModified", "\nHistoryAhead", "\nOutOfOrder"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			from := src
			if tt.src != nil {
				from = tt.src
			}
			v := Compare(from, tt.history, tt.holds...)
			if v.Kind != tt.kind || v.Reason() != string(tt.kind) {
				t.Errorf("kind %s, want %s:\n%s", v.Kind, tt.kind, v.Message())
			}
			blocked := tt.kind != Pending && tt.kind != UpToDate
			if v.Blocked() != blocked {
				t.Errorf("Blocked() = %v, want %v", v.Blocked(), blocked)
			}
			if got := v.Versions(); !slices.Equal(got, tt.versions) {
				t.Errorf("versions %q, want %q", got, tt.versions)
			}
			var pending []string
			for _, f := range v.Pending {
				pending = append(pending, f.Path)
			}
			if !slices.Equal(pending, tt.pending) {
				t.Errorf("pending %q, want %q", pending, tt.pending)
			}
			msg, at := v.Message(), 0
			for _, s := range tt.says {
				i := strings.Index(msg[at:], s)
				if i < 0 {
					t.Errorf("the message does not say %q (after offset %d):\n%s", s, at, msg)
					break
				}
				at += i + len(s)
			}
		})
	}
}

func reversed(rows []Applied) []Applied {
	rows = slices.Clone(rows)
	slices.Reverse(rows)
	return rows
}
