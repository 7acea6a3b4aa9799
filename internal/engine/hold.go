package engine

import (
	"time"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// Hold is what keeps ptah serve from starting anything for a resource,
// as its shell finds it before (or instead of) a pass: the resource's
// schedule, its spec, and a reading that failed.
type Hold struct {
	// Suspended: spec.suspend is true.
	Suspended bool
	// Unservable says why the spec cannot be served ("" when it can).
	Unservable string
	// ReadingFailed says why a reading failed ("" when none did).
	ReadingFailed string
	// Uncertain: the status records a run whose outcome is not known (a
	// pending observation, an unresolved run).
	Uncertain bool
}

// Held decides the status of a resource under hold, and whether it holds:
// only a resource with nothing under way (no claim, no uncertain run, no
// owed release) is held, since a run under way is accounted for whatever
// its resource's spec says now. A suspension holds first (its phase stays
// where it was: nothing changed in the database), then a spec that cannot
// be served, then a failed reading (both Blocked, with the reason).
func Held(rs api.RunState, h Hold, generation int64, now time.Time) (api.RunState, bool) {
	if rs.ActiveOperation != nil || rs.OwedRelease != nil || h.Uncertain {
		return rs, false
	}
	switch {
	case h.Suspended:
		rs.Reason, rs.Message = api.ReasonSuspended, "spec.suspend is true: ptah serve starts nothing for this resource"
	case h.Unservable != "":
		setPhase(&rs, api.PhaseBlocked, api.ReasonInvalidSpec, h.Unservable)
	case h.ReadingFailed != "":
		setPhase(&rs, api.PhaseBlocked, api.ReasonReadingFailed, "reading the database and the declared files failed: "+h.ReadingFailed)
	default:
		return rs, false
	}
	rs.ObservedGeneration = generation
	rs.Conditions = SetReady(rs.Conditions, rs, generation, now)
	return rs, true
}
