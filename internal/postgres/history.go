package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// How a version came to be in a migration history.
const (
	// HowRun: a writer ran the version's file (see Phase.History).
	HowRun = "run"
	// HowMarked: a person marked the version applied (resolve-run), after
	// establishing what an uncertain run did.
	HowMarked = "marked"
	// HowBaseline: the version was recorded as already present when an
	// existing database was adopted.
	HowBaseline = "baseline"
)

// HistoryRow is one version of a resource's migration history
// (ptah.migration_history).
//
// As an input (Phase.History, RecordHistory) only Version, Name,
// Checksum, How, OperationID and AppliedBy are read; the server's clock
// sets AppliedAt, and the writer the duration and operation of a run.
type HistoryRow struct {
	Version  string
	Name     string
	Checksum string
	How      string // HowRun, HowMarked or HowBaseline
	// AppliedAt is when the row committed, on the server's clock (for a
	// run, when its file's last statement completed).
	AppliedAt time.Time
	// Duration is how long the file ran (0 for a version not run).
	Duration time.Duration
	// OperationID is the operation that ran the version, or, for one
	// marked applied, the operation whose run was resolved.
	OperationID string
	// AppliedBy is who applied it: for a run, whatever the caller named
	// (by default the database role); for a mark, the person.
	AppliedBy string
}

// historyReader is what ReadHistory reads through: a connection or a
// transaction.
type historyReader interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ReadHistory returns the migration history of resource (e.g.
// "PtahMigration/default/app"), ordered by when each version was recorded
// (then by version, bytewise); the caller orders versions its own way. It
// only reads: a database where ptah never recorded a history (no schema
// ptah, or no history table) has an empty one, and nothing is created.
// q is a connection, or a transaction of the caller's.
func ReadHistory(ctx context.Context, q historyReader, resource string) ([]HistoryRow, error) {
	rows, err := readHistory(ctx, q, resource)
	if err != nil {
		return nil, fmt.Errorf("reading the migration history of %s: %w", resource, err)
	}
	return rows, nil
}

func readHistory(ctx context.Context, q historyReader, resource string) ([]HistoryRow, error) {
	// Looked up first rather than caught (42P01): an error would abort a
	// caller's transaction.
	var present bool
	if err := q.QueryRow(ctx, "SELECT to_regclass('ptah.migration_history') IS NOT NULL").Scan(&present); err != nil {
		return nil, err
	}
	if !present {
		return []HistoryRow{}, nil
	}
	rows, err := q.Query(ctx, `
SELECT version, name, checksum, how, applied_at,
       coalesce(round(extract(epoch FROM duration) * 1000000), 0)::bigint,
       coalesce(operation_id, ''), coalesce(applied_by, '')
FROM ptah.migration_history WHERE resource = $1
ORDER BY applied_at, version COLLATE "C"`, resource)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (HistoryRow, error) {
		var h HistoryRow
		var micros int64
		err := row.Scan(&h.Version, &h.Name, &h.Checksum, &h.How, &h.AppliedAt, &micros, &h.OperationID, &h.AppliedBy)
		h.Duration = time.Duration(micros) * time.Microsecond
		return h, err
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []HistoryRow{}
	}
	return out, nil
}

// RecordHistory records rows in the migration history of resource as how
// (HowMarked: a person marked them applied; HowBaseline: an adopted
// database already had them), inside the caller's transaction tx, so that
// they commit with whatever else the caller records there (the
// acknowledgment of the run they settle). The server's clock sets their
// applied_at. It creates ptah's runtime tables inside tx if they are
// missing.
//
// A version already recorded for resource is refused (ErrHistoryExists)
// and, as any error, aborts tx: nothing of rows is recorded then.
func RecordHistory(ctx context.Context, tx pgx.Tx, resource string, rows []HistoryRow, how string) error {
	if err := recordHistory(ctx, tx, resource, rows, how); err != nil {
		return fmt.Errorf("recording versions of %s as %s in the migration history: %w", resource, how, err)
	}
	return nil
}

func recordHistory(ctx context.Context, tx pgx.Tx, resource string, rows []HistoryRow, how string) error {
	if how != HowMarked && how != HowBaseline {
		return fmt.Errorf("only a writer records a version as %q; a person records %q or %q", how, HowMarked, HowBaseline)
	}
	if resource == "" {
		return errors.New("no resource named")
	}
	for _, r := range rows {
		if err := r.check(); err != nil {
			return err
		}
	}
	if err := ensureRuntimeSchemaIn(ctx, tx); err != nil {
		return err
	}
	for _, r := range rows {
		_, err := tx.Exec(ctx, `
INSERT INTO ptah.migration_history (resource, version, name, checksum, applied_at, operation_id, applied_by, how, contract_version)
VALUES ($1, $2, $3, $4, clock_timestamp(), nullif($5, ''), coalesce(nullif($6, ''), current_user), $7, $8)`,
			resource, r.Version, r.Name, r.Checksum, r.OperationID, r.AppliedBy, how, api.ContractVersion)
		if err != nil {
			return fmt.Errorf("version %s: %w", r.Version, historyInsertError(err))
		}
	}
	return nil
}

func (r HistoryRow) check() error {
	if r.Version == "" {
		return errors.New("a history row without a version")
	}
	if r.Checksum == "" {
		return fmt.Errorf("version %s has no checksum", r.Version)
	}
	return nil
}

// recordRunHistory records the history row of a phase that ran, as part of
// the transaction that completes it: the phase's own (a transactional
// phase), or the one journaling its last statement's completion (a
// no-transaction phase). Its duration runs from the phase's first journaled
// statement (or, for a phase of none, from the start of this transaction)
// to now, on the server's clock.
func recordRunHistory(ctx context.Context, tx pgx.Tx, resource, operationID string, phase int, r *HistoryRow) error {
	return runHistory(resource, operationID, phase, r).exec(ctx, tx)
}

func runHistory(resource, operationID string, phase int, r *HistoryRow) write {
	how := r.How
	if how == "" {
		how = HowRun
	}
	return write{sql: `
INSERT INTO ptah.migration_history (resource, version, name, checksum, applied_at, duration, operation_id, applied_by, how, contract_version)
VALUES ($1, $2, $3, $4, clock_timestamp(),
	clock_timestamp() - coalesce((SELECT min(started_at) FROM ptah.run_steps WHERE operation_id = $5 AND phase = $6), now()),
	$5, coalesce(nullif($7, ''), current_user), $8, $9)`,
		args: []any{resource, r.Version, r.Name, r.Checksum, operationID, phase, r.AppliedBy, how, api.ContractVersion},
		check: func(_ pgconn.CommandTag, err error) error {
			if err != nil {
				return fmt.Errorf("recording version %s in the migration history of %s: %w", r.Version, resource, historyInsertError(err))
			}
			return nil
		}}
}

// historyInsertError words a refused history insert.
func historyInsertError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "migration_history_pkey" {
		return fmt.Errorf("%w: %w", ErrHistoryExists, err)
	}
	return err
}
