package postgres

import (
	"context"
	"time"
)

// SourceFile is one declared SQL file, in load order.
type SourceFile struct {
	Name string // shown in errors, e.g. "schema/001_tables.sql"
	SQL  string
}

// PlanRequest is everything needed to plan a declared schema.
type PlanRequest struct {
	TargetURL string
	// DevURL is a server (any database on it) where a temporary dev database
	// may be created to load the declared files. Empty: the target's server.
	DevURL      string
	Files       []SourceFile
	Schemas     []string // managed schemas; never "ptah"
	LockTimeout time.Duration
}

// PlanSchema observes the target, loads the declared files into a dev
// database, inspects both with the same code and returns the plan between
// them. It writes nothing to the target.
func PlanSchema(ctx context.Context, req PlanRequest) (*Plan, error) {
	panic("not implemented yet")
}
