package postgres

import (
	"slices"
	"testing"
)

func TestLockModesReadAsPostgreSQLNamesThem(t *testing.T) {
	for _, c := range []struct {
		in   string
		want LockMode
	}{
		{"ACCESS EXCLUSIVE", AccessExclusive},
		{"AccessExclusiveLock", AccessExclusive},
		{"SHARE UPDATE EXCLUSIVE", ShareUpdateExclusive},
		{"ShareUpdateExclusiveLock", ShareUpdateExclusive},
		{"ShareRowExclusiveLock", ShareRowExclusive},
		{"ShareLock", Share},
		{"ExclusiveLock", Exclusive},
		{"RowExclusiveLock", RowExclusive},
		{"AccessShareLock", AccessShare},
	} {
		got, ok := ParseLockMode(c.in)
		if !ok || got != c.want {
			t.Errorf("ParseLockMode(%q) = %v, %v; want %v", c.in, got, ok, c.want)
		}
		if back, _ := ParseLockMode(got.String()); back != got {
			t.Errorf("%v does not read back from its String %q", got, got.String())
		}
	}
	for _, bad := range []string{"", "access exclusive", "SIReadLock", "Exclusive"} {
		if m, ok := ParseLockMode(bad); ok {
			t.Errorf("ParseLockMode(%q) = %v, want refused", bad, m)
		}
	}
}

func TestLockModesSayWhatTheApplicationWaitsFor(t *testing.T) {
	for m := AccessShare; m <= AccessExclusive; m++ {
		if got, want := m.BlocksReads(), m == AccessExclusive; got != want {
			t.Errorf("%v.BlocksReads() = %v", m, got)
		}
		// ROW EXCLUSIVE (every write) conflicts with SHARE and stronger.
		if got, want := m.BlocksWrites(), m == Share || m == ShareRowExclusive || m == Exclusive || m == AccessExclusive; got != want {
			t.Errorf("%v.BlocksWrites() = %v", m, got)
		}
	}
}

func TestLockHazardsFollowTheLockHeldWhileWorkGrowsWithTheTable(t *testing.T) {
	on := func(m LockMode) []Lock { return []Lock{{Relation: "public.t", Mode: m}} }
	for _, c := range []struct {
		name    string
		hazards []Hazard
		locks   []Lock
		want    []Hazard
	}{
		{"a catalog change under ACCESS EXCLUSIVE holds it an instant", nil, on(AccessExclusive), nil},
		{"a rewrite under ACCESS EXCLUSIVE", []Hazard{HazardRewritesTable}, on(AccessExclusive),
			[]Hazard{HazardRewritesTable, HazardBlocksReads, HazardBlocksWrites}},
		{"an index build under SHARE", []Hazard{HazardBuildsIndex}, on(Share),
			[]Hazard{HazardBuildsIndex, HazardBlocksWrites}},
		{"a concurrent build under SHARE UPDATE EXCLUSIVE", []Hazard{HazardBuildsIndex}, on(ShareUpdateExclusive),
			[]Hazard{HazardBuildsIndex}},
		{"a validation under SHARE UPDATE EXCLUSIVE", []Hazard{HazardScansTable, HazardMayFail}, on(ShareUpdateExclusive),
			[]Hazard{HazardScansTable, HazardMayFail}},
		{"a check of existing rows under ACCESS EXCLUSIVE", []Hazard{HazardScansTable, HazardMayFail}, on(AccessExclusive),
			[]Hazard{HazardScansTable, HazardMayFail, HazardBlocksReads, HazardBlocksWrites}},
		{"a foreign key validated under SHARE ROW EXCLUSIVE", []Hazard{HazardScansTable, HazardMayFail},
			fkLocks(ShareRowExclusive), []Hazard{HazardScansTable, HazardMayFail, HazardBlocksWrites}},
		{"a check that reads no row (a sequence's bounds)", []Hazard{HazardMayFail}, on(ShareRowExclusive),
			[]Hazard{HazardMayFail}},
		{"stale lock hazards are recomputed", []Hazard{HazardBlocksWrites, HazardDeletesData}, on(AccessExclusive),
			[]Hazard{HazardDeletesData}},
		{"work on a table the plan creates locks nothing that exists", []Hazard{HazardBuildsIndex}, nil,
			[]Hazard{HazardBuildsIndex}},
	} {
		if got := LockHazards(c.hazards, c.locks); !slices.Equal(got, c.want) {
			t.Errorf("%s: LockHazards(%v, %v) = %v, want %v", c.name, c.hazards, c.locks, got, c.want)
		}
	}
}

// fkLocks is a foreign key's pair of locks: its table and the one it
// references.
func fkLocks(m LockMode) []Lock {
	return []Lock{{Relation: "public.t", Mode: m}, {Relation: "public.ref", Mode: m}}
}
