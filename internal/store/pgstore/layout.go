package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// layoutVersion is the version of the tables this file creates, recorded in
// ptah.schema_version under layoutComponent. Bump it, and teach ensureLayout
// to upgrade from the previous one, whenever the DDL below changes.
const (
	layoutVersion   = 1
	layoutComponent = "objects"
)

// schemaLockKey is the transaction advisory lock every ptah creator of
// tables in the ptah schema holds while creating them, so that processes
// starting at once on a fresh database create them one after another. It is
// internal/postgres.SchemaLockKey (a test holds them equal), repeated here
// so that the store does not depend on the SQL engine.
const schemaLockKey int64 = 0x7074616844444c // "ptahDDL"

// layoutDDL creates what this package owns in the ptah schema, idempotently.
//
// ptah.schema_version is keyed by component so that the other tables of the
// ptah schema (leases, run journal) can record their own layout versions in
// it; each creator uses this same definition.
//
// Text columns sort and compare in byte order (COLLATE "C"), so List orders
// the same on every server and in every backend.
const layoutDDL = `
CREATE SCHEMA IF NOT EXISTS ptah;

CREATE TABLE IF NOT EXISTS ptah.schema_version (
    component  text PRIMARY KEY,
    version    integer NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE SEQUENCE IF NOT EXISTS ptah.resource_version AS bigint;

CREATE TABLE IF NOT EXISTS ptah.objects (
    uid              text PRIMARY KEY,
    kind             text COLLATE "C" NOT NULL CHECK (kind <> ''),
    namespace        text COLLATE "C" NOT NULL,
    name             text COLLATE "C" NOT NULL CHECK (name <> ''),
    resource_version bigint NOT NULL,
    generation       bigint NOT NULL,
    contract_version integer NOT NULL,
    immutable        boolean NOT NULL,
    labels           jsonb NOT NULL,
    spec             jsonb,
    status           jsonb,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    CONSTRAINT ` + objectsNameKey + ` UNIQUE (kind, namespace, name)
);
COMMENT ON TABLE ptah.objects IS
    'ptah durable state: resources, plans and approvals with their status; resource_version is the optimistic-concurrency token, contract_version the ptah contract that last wrote the row';
COMMENT ON TABLE ptah.schema_version IS
    'ptah: layout version of each group of tables in this schema';
`

// ensureLayout makes sure the object tables exist at this binary's layout.
// The common case, tables already there, only reads: a role that may not
// create anything can still use an existing store.
func ensureLayout(ctx context.Context, db DB) error {
	v, err := storedLayout(ctx, db)
	if err != nil {
		return err
	}
	if v == 0 {
		if v, err = createLayout(ctx, db); err != nil {
			return err
		}
	}
	if v > layoutVersion {
		return fmt.Errorf("%w: its object tables are at layout %d, this ptah knows layout %d; upgrade ptah", ErrNewerLayout, v, layoutVersion)
	}
	return nil
}

// storedLayout returns the recorded layout version, 0 when there is none.
// The row is written in the transaction that creates the tables, so a
// version means the tables are there. It looks for the table before reading
// it, rather than catching the error, because an error would abort the
// caller's transaction when db is a pgx.Tx.
func storedLayout(ctx context.Context, db DB) (int, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('ptah.schema_version') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("looking for the ptah schema: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := db.QueryRow(ctx, `SELECT version FROM ptah.schema_version WHERE component = $1`, layoutComponent).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the ptah schema's layout version: %w", err)
	}
	return v, nil
}

// createLayout creates the tables and records the layout, retrying when it
// loses a race with DDL that does not take schemaLockKey.
func createLayout(ctx context.Context, db DB) (int, error) {
	const attempts = 3
	var err error
	for range attempts {
		var v int
		if v, err = createLayoutOnce(ctx, db); err == nil {
			return v, nil
		}
		if !isConcurrentDDL(err) {
			break
		}
	}
	return 0, fmt.Errorf("creating the ptah schema's object tables: %w", err)
}

// createLayoutOnce returns the layout version recorded once it is done,
// which is a newer one if a newer ptah got there first.
func createLayoutOnce(ctx context.Context, db DB) (int, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey); err != nil {
		return 0, err
	}
	// Under the lock, look again: another process may have finished, and a
	// newer ptah's layout must not be "repaired" with this one's DDL.
	if v, err := storedLayout(ctx, tx); err != nil || v != 0 {
		return v, err
	}
	if _, err := tx.Exec(ctx, layoutDDL); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO ptah.schema_version (component, version) VALUES ($1, $2)`,
		layoutComponent, layoutVersion); err != nil {
		return 0, err
	}
	return layoutVersion, tx.Commit(ctx)
}
