// Package pgstore is the local-mode store.Store: objects kept in the target
// database's own ptah schema, so that the durable state travels with the
// database it describes and every ptah pointed at that database sees it.
//
// Every write is one statement whose WHERE clause carries the preconditions,
// so optimistic concurrency is PostgreSQL's row locking, not a
// read-then-write in Go.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ptah-run/ptah/internal/store"
)

// DB is what the store needs of a connection. *pgxpool.Pool is the usual
// one; a *pgx.Conn works but serializes the store's callers (it is not safe
// for concurrent use); a pgx.Tx makes the store's writes part of the
// caller's transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

var (
	_ DB          = (*pgxpool.Pool)(nil)
	_ DB          = (*pgx.Conn)(nil)
	_ DB          = pgx.Tx(nil)
	_ store.Store = (*Store)(nil)
)

// Store keeps objects in ptah.objects.
type Store struct {
	db DB
}

// New returns a store on db, creating the ptah schema's object tables on
// first use. It refuses (ErrNewerLayout) tables laid out by a newer ptah.
func New(ctx context.Context, db DB) (*Store, error) {
	if err := ensureLayout(ctx, db); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// InTx returns a store on tx over the same tables as s, without checking
// them again: for writes that must commit in a caller's transaction (on
// the same database) together with the caller's own records.
func (s *Store) InTx(tx pgx.Tx) store.Store { return &Store{db: tx} }

// storedColumns are the columns of ptah.objects, in the order Create
// writes them.
const storedColumns = `uid, kind, namespace, name, resource_version, generation, contract_version,
	immutable, labels, spec, status, created_at, updated_at`

// Open returns a store on db without creating anything: for the verbs that
// only read. A database where ptah never recorded anything is ErrNoStore; a
// layout newer than this binary's is ErrNewerLayout.
func Open(ctx context.Context, db DB) (*Store, error) {
	v, err := storedLayout(ctx, db)
	switch {
	case err != nil:
		return nil, err
	case v == 0:
		return nil, ErrNoStore
	case v > layoutVersion:
		return nil, fmt.Errorf("%w: its object tables are at layout %d, this ptah knows layout %d; upgrade ptah", ErrNewerLayout, v, layoutVersion)
	}
	return &Store{db: db}, nil
}

// columns is the select list every read scans with scanObject.
const columns = storedColumns + `, ` + embeddedContractVersion

// metadataColumns is columns with spec and status read as NULL.
const metadataColumns = `uid, kind, namespace, name, resource_version, generation, contract_version,
	immutable, labels, NULL::jsonb, NULL::jsonb, created_at, updated_at, ` + embeddedContractVersion

// embeddedContractVersion derives store.Object.EmbeddedContractVersion from
// the row's spec and status, whoever wrote them.
const embeddedContractVersion = `(SELECT coalesce(max(v::text::numeric), 0)::integer
	FROM (SELECT jsonb_path_query(coalesce(spec, 'null'), 'strict $.**.contractVersion ? (@.type() == "number")')
	      UNION ALL
	      SELECT jsonb_path_query(coalesce(status, 'null'), 'strict $.**.contractVersion ? (@.type() == "number")')) e(v))`

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, kind, namespace, name string) (store.Object, error) {
	obj, err := s.queryOne(ctx, `SELECT `+columns+` FROM ptah.objects
		WHERE kind = $1 AND namespace = $2 AND name = $3`, kind, namespace, name)
	if err != nil {
		return store.Object{}, fmt.Errorf("getting %s: %w", store.Ref(kind, namespace, name), err)
	}
	return obj, nil
}

// GetByUID implements store.Store.
func (s *Store) GetByUID(ctx context.Context, uid string) (store.Object, error) {
	obj, err := s.queryOne(ctx, `SELECT `+columns+` FROM ptah.objects WHERE uid = $1`, uid)
	if err != nil {
		return store.Object{}, fmt.Errorf("getting the object with UID %q: %w", uid, err)
	}
	return obj, nil
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, opts store.ListOptions) ([]store.Object, error) {
	selectList := columns
	if opts.MetadataOnly {
		selectList = metadataColumns
	}
	rows, err := s.db.Query(ctx, `SELECT `+selectList+` FROM ptah.objects
		WHERE ($1 = '' OR kind = $1) AND ($2 = '' OR namespace = $2) AND labels @> $3::jsonb
		ORDER BY kind, namespace, name`,
		opts.Kind, opts.Namespace, labelsArg(opts.Labels))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", describe(opts), err)
	}
	objs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Object, error) { return scanObject(row) })
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", describe(opts), err)
	}
	return objs, nil
}

func describe(opts store.ListOptions) string {
	what := "objects"
	if opts.Kind != "" {
		what = opts.Kind + " objects"
	}
	if opts.Namespace != "" {
		what += " in namespace " + opts.Namespace
	}
	return what
}

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, obj store.Object) (store.Object, error) {
	ref := store.Ref(obj.Kind, obj.Namespace, obj.Name)
	if err := store.CheckCreate(obj); err != nil {
		return store.Object{}, fmt.Errorf("creating %s: %w", ref, err)
	}
	created, err := s.queryOne(ctx, `INSERT INTO ptah.objects (`+storedColumns+`)
		VALUES ($1, $2, $3, $4, nextval('ptah.resource_version'), 1, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb, now(), now())
		RETURNING `+columns,
		store.NewUID(), obj.Kind, obj.Namespace, obj.Name, obj.ContractVersion, obj.Immutable,
		labelsArg(obj.Labels), jsonArg(obj.Spec), jsonArg(obj.Status))
	if isDuplicateName(err) {
		err = store.ErrAlreadyExists
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("creating %s: %w", ref, classify(err))
	}
	return created, nil
}

// Update implements store.Store. The generation and immutability rules are
// evaluated by PostgreSQL against the row it locked, with jsonb equality as
// the meaning of "the spec changed".
func (s *Store) Update(ctx context.Context, obj store.Object) (store.Object, error) {
	ref := store.Ref(obj.Kind, obj.Namespace, obj.Name)
	if err := store.Check(obj); err != nil {
		return store.Object{}, fmt.Errorf("updating %s: %w", ref, err)
	}
	updated, err := s.queryOne(ctx, `UPDATE ptah.objects SET
			labels = $6::jsonb, spec = $7::jsonb,
			contract_version = $8, immutable = $9,
			generation = generation + CASE WHEN spec IS NOT DISTINCT FROM $7::jsonb THEN 0 ELSE 1 END,
			resource_version = nextval('ptah.resource_version'), updated_at = now()
		WHERE kind = $1 AND namespace = $2 AND name = $3
			AND resource_version = $4 AND ($5 = '' OR uid = $5) AND contract_version <= $8
			AND (NOT immutable OR ($9 AND spec IS NOT DISTINCT FROM $7::jsonb))
		RETURNING `+columns,
		obj.Kind, obj.Namespace, obj.Name, obj.ResourceVersion, obj.UID,
		labelsArg(obj.Labels), jsonArg(obj.Spec), obj.ContractVersion, obj.Immutable)
	if errors.Is(err, store.ErrNotFound) {
		err = s.whyNotUpdated(ctx, obj, true)
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("updating %s: %w", ref, classify(err))
	}
	return updated, nil
}

// UpdateStatus implements store.Store.
func (s *Store) UpdateStatus(ctx context.Context, obj store.Object) (store.Object, error) {
	ref := store.Ref(obj.Kind, obj.Namespace, obj.Name)
	if err := store.Check(obj); err != nil {
		return store.Object{}, fmt.Errorf("updating the status of %s: %w", ref, err)
	}
	updated, err := s.queryOne(ctx, `UPDATE ptah.objects SET
			status = $6::jsonb, contract_version = $7,
			resource_version = nextval('ptah.resource_version'), updated_at = now()
		WHERE kind = $1 AND namespace = $2 AND name = $3
			AND resource_version = $4 AND ($5 = '' OR uid = $5) AND contract_version <= $7
		RETURNING `+columns,
		obj.Kind, obj.Namespace, obj.Name, obj.ResourceVersion, obj.UID,
		jsonArg(obj.Status), obj.ContractVersion)
	if errors.Is(err, store.ErrNotFound) {
		err = s.whyNotUpdated(ctx, obj, false)
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("updating the status of %s: %w", ref, classify(err))
	}
	return updated, nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, kind, namespace, name, uid string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM ptah.objects
		WHERE kind = $1 AND namespace = $2 AND name = $3 AND ($4 = '' OR uid = $4)`,
		kind, namespace, name, uid)
	if err == nil && tag.RowsAffected() == 0 {
		err = s.whyNotDeleted(ctx, kind, namespace, name, uid)
	}
	if err != nil {
		return fmt.Errorf("deleting %s: %w", store.Ref(kind, namespace, name), err)
	}
	return nil
}

// whyNotUpdated explains an Update (spec true) or UpdateStatus that matched
// no row, from the row as it is now, checking in the order memstore does.
// A write racing in between can turn the answer into ErrConflict, which is
// still true: the caller's view is out of date.
func (s *Store) whyNotUpdated(ctx context.Context, obj store.Object, spec bool) error {
	cur, err := s.current(ctx, obj.Kind, obj.Namespace, obj.Name)
	switch {
	case err != nil:
		return err
	case cur.contractVersion > obj.ContractVersion:
		return fmt.Errorf("contract version %d, the write carries %d: %w", cur.contractVersion, obj.ContractVersion, store.ErrNewerContract)
	case obj.UID != "" && obj.UID != cur.uid:
		return fmt.Errorf("UID %s, not %s: %w", cur.uid, obj.UID, store.ErrConflict)
	case obj.ResourceVersion != cur.rv:
		return fmt.Errorf("resourceVersion %d, not %d: %w", cur.rv, obj.ResourceVersion, store.ErrConflict)
	case spec && cur.immutable:
		return store.ErrImmutable
	}
	return store.ErrConflict
}

// whyNotDeleted explains a Delete that matched no row.
func (s *Store) whyNotDeleted(ctx context.Context, kind, namespace, name, uid string) error {
	cur, err := s.current(ctx, kind, namespace, name)
	if err != nil {
		return err
	}
	return fmt.Errorf("UID %s, not %s: %w", cur.uid, uid, store.ErrConflict)
}

type row struct {
	uid             string
	rv              int64
	immutable       bool
	contractVersion int
}

// current reads what the preconditions are checked against.
func (s *Store) current(ctx context.Context, kind, namespace, name string) (row, error) {
	var r row
	err := s.db.QueryRow(ctx, `SELECT uid, resource_version, immutable, contract_version FROM ptah.objects
		WHERE kind = $1 AND namespace = $2 AND name = $3`,
		kind, namespace, name).Scan(&r.uid, &r.rv, &r.immutable, &r.contractVersion)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return row{}, store.ErrNotFound
	case err != nil:
		return row{}, fmt.Errorf("reading back after a refused write: %w", err)
	}
	return r, nil
}

// queryOne runs a statement returning at most one object; no row is
// store.ErrNotFound.
func (s *Store) queryOne(ctx context.Context, sql string, args ...any) (store.Object, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return store.Object{}, err
	}
	obj, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (store.Object, error) { return scanObject(row) })
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Object{}, store.ErrNotFound
	}
	return obj, err
}

func scanObject(row pgx.Row) (store.Object, error) {
	var (
		o            store.Object
		spec, status []byte
	)
	err := row.Scan(&o.UID, &o.Kind, &o.Namespace, &o.Name, &o.ResourceVersion, &o.Generation,
		&o.ContractVersion, &o.Immutable, &o.Labels, &spec, &status, &o.CreatedAt, &o.UpdatedAt, &o.EmbeddedContractVersion)
	if err != nil {
		return store.Object{}, err
	}
	if len(o.Labels) == 0 {
		o.Labels = nil
	}
	o.Spec, o.Status = store.NormalizeJSON(spec), store.NormalizeJSON(status)
	o.CreatedAt, o.UpdatedAt = o.CreatedAt.UTC(), o.UpdatedAt.UTC()
	return o, nil
}

// jsonArg passes JSON as text for a ::jsonb parameter; absent is SQL NULL,
// so that "no spec" compares equal to "no spec".
func jsonArg(raw json.RawMessage) any {
	if raw = store.NormalizeJSON(raw); raw == nil {
		return nil
	}
	return string(raw)
}

// labelsArg passes labels as a JSON object, {} when there are none (a
// containment test against {} selects everything).
func labelsArg(labels map[string]string) string {
	if len(labels) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(labels) // a map of strings always marshals
	return string(b)
}
