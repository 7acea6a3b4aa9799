// Package store is ptah's durable state: resources, plans, approvals and
// their status, kept as objects with Kubernetes-like semantics so that the
// same engine runs against the target database's ptah schema (local mode,
// package pgstore) and against custom resources (package kubestore).
//
// The package imports no database. Implementations live in subpackages and
// prove themselves with the contract suite in package storetest.
package store

import (
	"context"
	"encoding/json"
	"time"
)

// Object is one stored object. Kind, Namespace and Name identify it for as
// long as it exists; UID identifies this particular incarnation, so that a
// record naming a UID never silently refers to a later object that reused
// the name (an approval for a replaced plan must authorize nothing).
type Object struct {
	Kind      string
	Namespace string // "" is allowed; local mode uses "default" by convention
	Name      string

	// UID is assigned by Create (a random UUID v4 in text form) and never
	// changes.
	UID string
	// ResourceVersion is assigned by the store on every write and strictly
	// increases across all objects of a store. Writes are conditional on it:
	// it is the optimistic-concurrency token.
	ResourceVersion int64
	// Generation is 1 on Create and increases by one on every Update that
	// changes Spec. Status writes never change it, so status can record the
	// generation it was computed from.
	Generation int64
	// ContractVersion is the contract version of the ptah that wrote the
	// object. The caller sets it on every write and the store records it, so
	// that an older ptah can refuse state it would misread.
	ContractVersion int
	// EmbeddedContractVersion is the highest contract version recorded
	// inside Spec or Status: any number-valued "contractVersion" member, at
	// any depth; 0 when there is none. The store derives it on every read
	// (MetadataOnly lists included, so the stored-state fence sees it
	// without reading every spec); it is ignored on writes.
	EmbeddedContractVersion int
	// Immutable, set at Create (or turned on by Update), forbids any later
	// change of Spec. Plans and approvals are created immutable: what was
	// approved is what stays stored.
	Immutable bool

	Labels map[string]string // for selection, e.g. plans of one schema
	Spec   json.RawMessage
	Status json.RawMessage

	// CreatedAt and UpdatedAt are set by the store, in UTC, as precisely as
	// the backend records them (Kubernetes: to the second). UpdatedAt is
	// never before CreatedAt.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ListOptions selects objects. Empty fields select everything.
type ListOptions struct {
	Kind      string            // "" lists every kind (the stored-state fence scans all)
	Namespace string            // "" lists every namespace
	Labels    map[string]string // objects carrying all of these labels
	// MetadataOnly leaves Spec and Status out of the listed objects: what
	// the stored-state fence and a census need, without reading every plan.
	MetadataOnly bool
}

// Store keeps objects durably. Every implementation passes the contract
// suite in package storetest, which is the executable form of what follows.
//
// Identity and versions:
//   - Create assigns UID, ResourceVersion, Generation (1), CreatedAt and
//     UpdatedAt; whatever the caller put there is ignored.
//   - Every successful write that changes the object assigns a
//     ResourceVersion greater than any the store assigned before, to this
//     object or any other. A write that changes nothing may keep the
//     object's ResourceVersion (Kubernetes does); it never lowers it.
//   - Status is written by UpdateStatus alone, as in Kubernetes, where the
//     status subresource is the manager's: Create refuses an object with a
//     Status (ErrInvalid) and Update leaves the stored Status as it is.
//   - Spec and Status are JSON. They are returned semantically equal to what
//     was written, not necessarily byte-equal (key order and whitespace may
//     change). An empty value or JSON null is stored as absent and returned
//     as nil. Empty Labels are returned as nil.
//
// Preconditions (checked atomically with the write; on failure nothing is
// written):
//   - Update and UpdateStatus require obj.ContractVersion to be at least the
//     stored one.
//   - Update and UpdateStatus require obj.ResourceVersion to equal the stored
//     one, and obj.UID, when non-empty, to equal the stored one.
//   - Delete requires uid, when non-empty, to equal the stored UID.
//
// Errors, always wrapped with what the store was doing, so use errors.Is:
//   - ErrNotFound: Get, GetByUID, Update, UpdateStatus, Delete of an object
//     that does not exist.
//   - ErrAlreadyExists: Create of a kind/namespace/name that exists.
//   - ErrConflict: a failed precondition. The caller must re-read and decide
//     again. When several writers race from the same ResourceVersion,
//     exactly one succeeds.
//   - ErrNewerContract: Update or UpdateStatus of an object whose stored
//     ContractVersion is higher than obj.ContractVersion. Stored state never
//     goes back to an older contract: a ptah must not rewrite what a newer
//     one wrote. Checked before the other preconditions.
//   - ErrImmutable: Update that changes the Spec of an immutable object or
//     sets Immutable false on it. Labels and Status stay writable.
//   - ErrInvalid: an object without Kind or Name, without a positive
//     ContractVersion, with an empty label key, or whose Spec or Status is
//     not valid JSON; a Create with a Status; where the backend requires a
//     namespace (Kubernetes), an object without one.
//   - Anything else is the backend failing (connection lost, ...). Such a
//     write may or may not have happened; re-read to find out.
//
// Objects returned are the caller's: modifying them does not modify the
// store.
type Store interface {
	// Get returns the object with this kind, namespace and name.
	Get(ctx context.Context, kind, namespace, name string) (Object, error)
	// GetByUID returns the object with this UID, whatever its name. A UID
	// that is malformed is simply not found.
	GetByUID(ctx context.Context, uid string) (Object, error)
	// List returns the selected objects sorted by kind, namespace and name
	// (byte order). No match is an empty result, not an error.
	List(ctx context.Context, opts ListOptions) ([]Object, error)
	// Create stores a new object and returns it as stored.
	Create(ctx context.Context, obj Object) (Object, error)
	// Update replaces Spec, Labels and ContractVersion (and may turn
	// Immutable on) and returns the object as stored; Status stays as
	// stored. Generation increases iff Spec changed semantically.
	Update(ctx context.Context, obj Object) (Object, error)
	// UpdateStatus replaces only Status and ContractVersion; Spec, Labels
	// and Immutable in obj are ignored. Generation does not change.
	UpdateStatus(ctx context.Context, obj Object) (Object, error)
	// Delete removes the object.
	Delete(ctx context.Context, kind, namespace, name, uid string) error
}
