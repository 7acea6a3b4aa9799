package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Identity names the database a plan was computed for, so that an approval
// cannot be spent on another one. The target identity digest is derived from
// SystemIdentifier, Database and DatabaseOID.
//
// ServerVersion is for display: a minor upgrade changes it, and an upgrade
// must not by itself invalidate approvals, so it belongs in no digest.
type Identity struct {
	// SystemIdentifier is the cluster's system identifier from
	// pg_control_system() (a decimal number, fixed at initdb), or, when the
	// role may not call that function, "ptah:<uuid>": an identifier minted
	// once for this database and stored in ptah.target_instance.
	SystemIdentifier string
	Database         string
	DatabaseOID      uint32
	ServerVersion    string
}

// mintedPrefix marks a SystemIdentifier that ptah minted (see Identity).
const mintedPrefix = "ptah:"

// Minted reports whether SystemIdentifier was minted by ptah rather than
// read from the server.
func (id Identity) Minted() bool {
	return strings.HasPrefix(id.SystemIdentifier, mintedPrefix)
}

// TargetIdentity reads the identity of the database conn is connected to.
//
// pg_control_system() is executable by PUBLIC on PostgreSQL 15 as shipped,
// so any role normally gets the real system identifier. Some installations
// (managed services, hardened servers) revoke it. Nothing else a plain role
// can read identifies a server stably: data_directory needs
// pg_read_all_settings, inet_server_addr() depends on the route (NULL over a
// unix socket), pg_postmaster_start_time() changes at every restart, and a
// database OID repeats across servers (most first user databases are 16384,
// which would make staging and production look alike). So the fallback is
// an identifier ptah mints once, with gen_random_uuid(), and keeps in
// ptah.target_instance: stable across restarts and connection routes, and
// distinct per database.
//
// Consequences, by design: the fallback writes to the target (it creates
// the ptah schema if needed, as every other verb of local mode does); a
// database restored from a dump that includes the ptah schema carries the
// same identifier, as a physical copy carries the same system identifier;
// and granting or revoking EXECUTE on pg_control_system() changes the
// identity, which makes existing plans stale rather than wrongly current.
func TargetIdentity(ctx context.Context, conn *pgx.Conn) (Identity, error) {
	var id Identity
	err := conn.QueryRow(ctx, `SELECT d.datname, d.oid, current_setting('server_version')
		FROM pg_database d WHERE d.datname = current_database()`).
		Scan(&id.Database, &id.DatabaseOID, &id.ServerVersion)
	if err != nil {
		return Identity{}, fmt.Errorf("reading the target database's identity: %w", err)
	}
	err = conn.QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&id.SystemIdentifier)
	if IsInsufficientPrivilege(err) {
		// mintedIdentifier says what it was doing when it fails.
		if id.SystemIdentifier, err = mintedIdentifier(ctx, conn); err != nil {
			return Identity{}, err
		}
		return id, nil
	}
	if err != nil {
		return Identity{}, fmt.Errorf("reading the server's system identifier: %w", err)
	}
	return id, nil
}

// ErrNoIdentity: the database has no identity ptah can read without
// writing: the role may not read the server's system identifier and ptah
// never minted one here (so nothing was ever recorded under it either).
var ErrNoIdentity = errors.New("the database has no identity ptah can read without writing")

// ReadTargetIdentity is TargetIdentity for the verbs that only read: it
// never mints an identifier, returning ErrNoIdentity where it would.
func ReadTargetIdentity(ctx context.Context, conn *pgx.Conn) (Identity, error) {
	var id Identity
	err := conn.QueryRow(ctx, `SELECT d.datname, d.oid, current_setting('server_version')
		FROM pg_database d WHERE d.datname = current_database()`).
		Scan(&id.Database, &id.DatabaseOID, &id.ServerVersion)
	if err != nil {
		return Identity{}, fmt.Errorf("reading the target database's identity: %w", err)
	}
	err = conn.QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&id.SystemIdentifier)
	if !IsInsufficientPrivilege(err) {
		if err != nil {
			return Identity{}, fmt.Errorf("reading the server's system identifier: %w", err)
		}
		return id, nil
	}
	err = conn.QueryRow(ctx, `SELECT instance_id FROM ptah.target_instance`).Scan(&id.SystemIdentifier)
	if errors.Is(err, pgx.ErrNoRows) || isUndefinedRelation(err) {
		return Identity{}, ErrNoIdentity
	}
	if err != nil {
		return Identity{}, fmt.Errorf("reading the database's minted identifier: %w", err)
	}
	return id, nil
}

// mintedIdentifier returns this database's minted identifier, creating it
// on first use. Concurrent first uses agree: ON CONFLICT keeps the first.
func mintedIdentifier(ctx context.Context, conn *pgx.Conn) (string, error) {
	if err := ensureRuntimeSchema(ctx, conn); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, `INSERT INTO ptah.target_instance (instance_id)
		VALUES ($1 || gen_random_uuid()::text) ON CONFLICT (singleton) DO NOTHING`, mintedPrefix); err != nil {
		return "", fmt.Errorf("minting an identifier for the database: %w", err)
	}
	var minted string
	if err := conn.QueryRow(ctx, "SELECT instance_id FROM ptah.target_instance").Scan(&minted); err != nil {
		return "", fmt.Errorf("reading the database's minted identifier: %w", err)
	}
	return minted, nil
}
