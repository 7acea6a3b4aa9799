package store

import "errors"

// Sentinels every Store implementation returns, wrapped with what it was
// doing, so that callers classify with errors.Is and never by message.
var (
	// ErrNotFound: no object has that kind, namespace and name (or UID).
	ErrNotFound = errors.New("object not found")
	// ErrAlreadyExists: Create found an object with the same kind,
	// namespace and name.
	ErrAlreadyExists = errors.New("object already exists")
	// ErrConflict: a precondition failed. The object changed since the
	// caller read it (resourceVersion), or it is not the object the caller
	// meant (UID). Re-read and decide again; never retry blindly.
	ErrConflict = errors.New("object was modified or replaced since it was read")
	// ErrImmutable: the write would change the spec of an object created
	// immutable, or make it mutable again.
	ErrImmutable = errors.New("object is immutable")
	// ErrInvalid: the object cannot be stored as given (no kind or name, no
	// contract version, spec or status not JSON, ...). Retrying cannot help.
	ErrInvalid = errors.New("invalid object")
	// ErrNewerContract: the stored object was written under a newer
	// contract version than the write carries. Nothing was written; this
	// ptah must not rewrite (or interpret) it: upgrade ptah.
	ErrNewerContract = errors.New("object was written by a newer ptah")
)
