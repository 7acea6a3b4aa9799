package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/script"
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
	// Online plans keep the application writing (see DiffOptions.Online).
	Online bool
	// Privileges: the grants on the managed objects are read on both
	// sides and planned (privileges.go); otherwise they are not read.
	Privileges bool
	// ObserveTimeout bounds how long reading the target's catalog may wait
	// for a lock, and each of its queries (DefaultObserveTimeout when 0).
	ObserveTimeout time.Duration
	// Cache, when set, keeps the desired state the files load to, and
	// answers from it while nothing it depends on has changed
	// (desiredcache.go).
	Cache DesiredCache
	// OnCacheError, when set, hears why the cache could not be read or
	// written, when it could not: the plan is made without it.
	OnCacheError func(error)
	// OnWait, when set, hears (from another goroutine) what the reading of
	// the target's catalog waits for, once it has waited a second, and
	// again whenever that changes.
	OnWait func(waiting string)
}

// DefaultObserveTimeout is PlanRequest.ObserveTimeout's default.
const DefaultObserveTimeout = 30 * time.Second

// PlanSchema observes the target, loads the declared files into a dev
// database, inspects both with the same code and returns the plan between
// them. It writes nothing to the target.
func PlanSchema(ctx context.Context, req PlanRequest) (*postgres.Plan, error) {
	obs, err := Observe(ctx, req)
	if err != nil {
		return nil, err
	}
	return obs.Plan, nil
}

// Observation is one reading of both sides and the plan between them.
type Observation struct {
	Live, Desired *Model
	Plan          *postgres.Plan
	// DesiredFrom says where Desired came from: the files loaded into a
	// dev database, or the desired-state cache.
	DesiredFrom DesiredSource
}

// DesiredSource is where an observation's desired state came from.
type DesiredSource string

const (
	DesiredLoaded DesiredSource = "dev database"
	DesiredCached DesiredSource = "cache"
)

// Observe is PlanSchema keeping the models, which callers fingerprint.
//
// The plan's statements are cut into the transactions they run in (see
// postgres.PlanPhases), each within the lock budget of the target server,
// whose lock settings are read with its catalog.
func Observe(ctx context.Context, req PlanRequest) (*Observation, error) {
	// The target's catalog is read while the declared side is prepared:
	// the one waits on the target's server, the other on the dev server
	// and the cache.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type reading struct {
		live     *Model
		capacity postgres.LockCapacity
		err      error
	}
	target := make(chan reading, 1)
	go func() {
		live, capacity, err := inspectTarget(ctx, req)
		target <- reading{live, capacity, err}
	}()
	devServer := req.DevURL
	if devServer == "" {
		devServer = req.TargetURL
	}
	var (
		planned  diffResult
		desired  *Model
		key      string
		from     = DesiredLoaded
		cacheErr error
		admin    *pgx.Conn
	)
	directives, prepErr := readRenames(req.Files)
	if prepErr == nil {
		admin, prepErr = postgres.Connect(ctx, devServer)
	}
	if admin != nil {
		defer admin.Close(context.Background())
	}
	if prepErr == nil && req.Cache != nil {
		var parts keyParts
		if parts, prepErr = readKeyParts(ctx, admin); prepErr == nil {
			key = desiredKey(parts, req)
			desired, cacheErr = fetchCached(ctx, req.Cache, key)
		}
	}
	// The target's errors come first, as when the two were read in turn.
	r := <-target
	if r.err != nil {
		return nil, r.err
	}
	if prepErr != nil {
		return nil, prepErr
	}
	live, capacity := r.live, r.capacity
	opts := InspectOptions{Privileges: req.Privileges}
	if desired != nil {
		var ok bool
		if planned, ok = answerFromCache(req, desired, directives, live); ok {
			from = DesiredCached
		} else {
			desired = nil
		}
	}
	if desired == nil {
		// The plan is computed while the dev database is there, to check
		// with the server what the model cannot tell (checkCasts).
		var err error
		desired, err = loadDesired(ctx, admin, req.Files, req.Schemas, opts, func(dev *pgx.Conn, desired *Model) error {
			renames, err := resolveRenames(directives, live, desired)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrLoad, err)
			}
			to := desired
			if len(renames) > 0 {
				if to, err = underOldNames(ctx, dev, renames, req.Schemas, opts); err != nil {
					return err
				}
			}
			planned, err = diff(live, to, DiffOptions{Online: req.Online, Renames: renames})
			if err != nil {
				return err
			}
			return checkCasts(ctx, dev, planned.casts)
		})
		if err != nil {
			return nil, err
		}
		if req.Cache != nil && cacheErr == nil {
			cacheErr = storeDesired(ctx, req.Cache, key, desired)
		}
	}
	stmts := planned.stmts
	plan := &postgres.Plan{Statements: stmts, Phases: postgres.PlanPhases(stmts, capacity.Budget()), LockCapacity: capacity, LocksKnown: true,
		Destructive: postgres.Destructive(stmts), LockTimeout: req.LockTimeout, Hints: planned.hints}
	if cacheErr != nil && req.OnCacheError != nil {
		req.OnCacheError(cacheErr)
	}
	return &Observation{Live: live, Desired: desired, Plan: plan, DesiredFrom: from}, nil
}

// fetchCached reads the model stored under key in the desired-state
// cache: nil when there is none, or the entry cannot be read as one (a
// miss). A cache that cannot be read is a miss too, and its error is
// returned to be reported.
func fetchCached(ctx context.Context, cache DesiredCache, key string) (*Model, error) {
	data, err := cache.Get(ctx, key)
	if err != nil || data == nil {
		return nil, err
	}
	return decodeDesired(key, data), nil
}

// answerFromCache plans from live to a cached desired model, unless the
// plan needs the dev database: a declared rename to look up, a cast to
// try (then ok is false, and the files are loaded).
func answerFromCache(req PlanRequest, desired *Model, directives []renameDirective, live *Model) (diffResult, bool) {
	renames, err := resolveRenames(directives, live, desired)
	if err != nil || len(renames) > 0 {
		// Errors are the load's to report, with the dev database.
		return diffResult{}, false
	}
	planned, err := diff(live, desired, DiffOptions{Online: req.Online})
	if err != nil || len(planned.casts) > 0 {
		return diffResult{}, false
	}
	return planned, true
}

// storeDesired writes the model the files loaded to under key.
func storeDesired(ctx context.Context, cache DesiredCache, key string, desired *Model) error {
	data, err := encodeDesired(key, desired)
	if err != nil {
		return err
	}
	return cache.Put(ctx, key, data)
}

// underOldNames undoes renames in the dev database, in a transaction it
// rolls back, and inspects it: the desired state as PostgreSQL describes
// it under the names the target has (see renames.go).
func underOldNames(ctx context.Context, dev *pgx.Conn, renames []Rename, schemas []string, opts InspectOptions) (*Model, error) {
	tx, err := dev.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for _, sql := range undoRenames(renames) {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("undoing the declared renames in the dev database (%s): %w", sql, err)
		}
	}
	m, err := InspectWith(ctx, tx.Conn(), schemas, opts)
	if err != nil {
		return nil, where(err, "declared schema")
	}
	return m, nil
}

// inspectTarget reads the target's catalog on a session of its own, whose
// every wait is bounded: a session holding a lock on a managed table (an
// open migration, a LOCK TABLE) makes the catalog functions wait, and ptah
// plan must say so, then give up, rather than hang.
func inspectTarget(ctx context.Context, req PlanRequest) (*Model, postgres.LockCapacity, error) {
	conn, err := postgres.Connect(ctx, req.TargetURL)
	if err != nil {
		return nil, postgres.LockCapacity{}, err
	}
	defer conn.Close(context.Background())
	bound := req.ObserveTimeout
	if bound <= 0 {
		bound = DefaultObserveTimeout
	}
	ms := bound.Milliseconds()
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d; SET statement_timeout = %d", ms, ms)); err != nil {
		return nil, postgres.LockCapacity{}, fmt.Errorf("bounding the catalog reading: %w", err)
	}
	w := watchWaits(ctx, req.TargetURL, conn.PgConn().PID(), req.OnWait)
	m, err := InspectWith(ctx, conn, req.Schemas, InspectOptions{Privileges: req.Privileges})
	waited := w.stop()
	if (postgres.IsLockTimeout(err) || postgres.IsQueryCanceled(err)) && ctx.Err() == nil {
		return nil, postgres.LockCapacity{}, &ObserveTimeoutError{Timeout: bound, Waiting: waited}
	}
	if err != nil {
		return nil, postgres.LockCapacity{}, where(err, "target database")
	}
	capacity, err := postgres.ReadLockCapacity(ctx, conn)
	if err != nil {
		return nil, postgres.LockCapacity{}, err
	}
	return m, capacity, nil
}

// waitWatcher watches, from a session of its own, what another session
// waits for.
type waitWatcher struct {
	cancel context.CancelFunc
	done   chan struct{}
	last   string
}

// watchWaits starts watching session pid: after a second, and every second
// after, it reads what the session waits for and tells onWait when that
// changed. It opens its session only once a second has passed, so a quick
// reading costs nothing.
func watchWaits(ctx context.Context, url string, pid uint32, onWait func(string)) *waitWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &waitWatcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var watcher *pgx.Conn
		defer func() {
			if watcher != nil {
				_ = watcher.Close(context.Background())
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if watcher == nil {
				var err error
				if watcher, err = postgres.Connect(ctx, url); err != nil {
					return
				}
			}
			a, err := postgres.PIDActivity(ctx, watcher, pid)
			if err != nil {
				return
			}
			if waiting := a.Waiting(); waiting != "" && waiting != w.last {
				w.last = waiting
				if onWait != nil {
					onWait(waiting)
				}
			}
		}
	}()
	return w
}

// stop ends the watch and returns the last wait it saw ("" for none).
func (w *waitWatcher) stop() string {
	w.cancel()
	<-w.done
	return w.last
}

func where(err error, place string) error {
	var u *UnsupportedError
	if errors.As(err, &u) {
		u.Where = place
	}
	return err
}

// LoadDesired creates a temporary dev database on the server at serverURL,
// runs the declared files in it, inspects it and drops it.
func LoadDesired(ctx context.Context, serverURL string, files []SourceFile, schemas []string) (*Model, error) {
	admin, err := postgres.Connect(ctx, serverURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	return loadDesired(ctx, admin, files, schemas, InspectOptions{}, nil)
}

// loadDesired is LoadDesired on the server admin is connected to, calling then (when not nil) with the dev
// database and its model before the dev database is dropped.
func loadDesired(ctx context.Context, admin *pgx.Conn, files []SourceFile, schemas []string, opts InspectOptions,
	then func(dev *pgx.Conn, desired *Model) error) (*Model, error) {
	name := "ptah_dev_" + randomHex(6)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0"); err != nil {
		return nil, devDatabaseError(admin.Config().User, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}()

	cfg := admin.Config().Copy()
	cfg.Database = name
	delete(cfg.RuntimeParams, "search_path") // the files run as a user would run them
	dev, err := postgres.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer dev.Close(context.Background())
	for _, f := range files {
		if err := loadFile(ctx, dev, f); err != nil {
			return nil, err
		}
	}
	if _, err := dev.Exec(ctx, "RESET ALL; SET search_path TO pg_catalog"); err != nil {
		return nil, fmt.Errorf("preparing the dev database: %w", err)
	}
	if err := checkScope(ctx, dev, schemas); err != nil {
		return nil, err
	}
	m, err := InspectWith(ctx, dev, schemas, opts)
	if err != nil {
		return nil, where(err, "declared schema")
	}
	if then != nil {
		if err := then(dev, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func devDatabaseError(role string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return fmt.Errorf("%w: role %q may not create databases on this server; grant it CREATEDB, or pass --dev-url to a server where it may", ErrDevDatabase, role)
	}
	return fmt.Errorf("%w: %v", ErrDevDatabase, err)
}

// loadFile runs one declared file in the dev database, statement by
// statement, each in a transaction of its own. The dev database needs no
// atomicity, and a file sent whole would run in one implicit transaction,
// which must hold a lock on every relation the file creates: more than a
// server with the default max_locks_per_transaction can hold, for a schema
// of a few thousand tables. It also lets a file hold statements PostgreSQL
// refuses in a transaction block: CREATE INDEX CONCURRENTLY builds the same
// index, and VACUUM does no harm; but statements that act on the server
// outside the dev database are refused (see outsideTheDatabase).
func loadFile(ctx context.Context, dev *pgx.Conn, f SourceFile) error {
	// The server reports the setting whenever it changes, as psql reads it.
	opts := script.Options{NonStandardStrings: dev.PgConn().ParameterStatus("standard_conforming_strings") == "off"}
	stmts, err := opts.Split(f.SQL)
	if err != nil {
		e := &LoadError{File: f.Name, Message: err.Error()}
		if se, ok := errors.AsType[*script.Error](err); ok {
			e.Line, e.Column, e.Message = se.Line, se.Column, se.Msg
		}
		return e
	}
	for _, st := range stmts {
		if what := outsideTheDatabase(st.Head); what != "" {
			return &LoadError{File: f.Name, Line: st.Line, Column: st.Column, Message: fmt.Sprintf(
				"%s acts on the server outside the database the declared files describe; ptah loads them into a temporary dev database, and refuses to run it there", what)}
		}
		if _, err := dev.Exec(ctx, st.SQL); err != nil {
			return loadError(f, st, err)
		}
	}
	return nil
}

// outsideTheDatabase names the statements that act beyond the database
// they run in, on other databases or on the whole server: in a declared
// file they would act on the dev database's server (the target's, by
// default) each time a plan is computed. Most of them PostgreSQL refuses
// in a transaction block, which stopped them, by accident, in a file of
// several statements while files were sent whole.
func outsideTheDatabase(head []string) string {
	word := func(i int) string {
		if i < len(head) {
			return head[i]
		}
		return ""
	}
	switch word(0) {
	case "create", "alter", "drop":
		switch word(1) {
		case "database", "tablespace", "subscription":
			return strings.ToUpper(word(0) + " " + word(1))
		case "system":
			return "ALTER SYSTEM"
		}
	case "commit", "rollback":
		if word(1) == "prepared" {
			return strings.ToUpper(word(0)) + " PREPARED"
		}
	case "prepare":
		if word(1) == "transaction" {
			return "PREPARE TRANSACTION"
		}
	}
	return ""
}

// loadError places PostgreSQL's error in the file: at the position it
// gives (a character offset in the statement), else at the start of the
// statement that failed.
func loadError(f SourceFile, st script.Statement, err error) error {
	e := &LoadError{File: f.Name, Line: st.Line, Column: st.Column, Message: err.Error()}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		e.Message = pgErr.Message + " (SQLSTATE " + pgErr.Code + ")"
		if pgErr.Detail != "" {
			e.Message += "\n" + pgErr.Detail
		}
		if pgErr.Code == "42704" && strings.HasPrefix(pgErr.Message, "role ") {
			// A GRANT, a policy or an owner names a role the server lacks.
			e.Message += "\nptah does not create roles: create it on the server the declared files are loaded on " +
				"(the target's, or --dev-url's) as on the target, then plan again"
		}
		if pgErr.Position > 0 {
			e.Line, e.Column = script.Position(f.SQL, st.Start+byteOffset(st.SQL, int(pgErr.Position)))
		}
	}
	return e
}

// byteOffset turns PostgreSQL's 1-based character position in text into a
// byte offset.
func byteOffset(text string, position int) int {
	i := 0
	for n := 1; n < position && i < len(text); n++ {
		_, size := utf8.DecodeRuneInString(text[i:])
		i += size
	}
	return i
}

// checkScope refuses declared objects in schemas ptah was not told to
// manage: they would be silently ignored otherwise.
func checkScope(ctx context.Context, conn *pgx.Conn, schemas []string) error {
	rows, err := conn.Query(ctx, `
SELECT n.nspname FROM pg_namespace n
WHERE n.nspname <> ALL($1) AND n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema'
  AND (n.nspname <> 'public'
       OR EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid)
       OR EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = n.oid)
       OR EXISTS (SELECT 1 FROM pg_type t WHERE t.typnamespace = n.oid))
ORDER BY 1`, schemas)
	if err != nil {
		return fmt.Errorf("reading the dev database's schemas: %w", err)
	}
	outside, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("reading the dev database's schemas: %w", err)
	}
	if len(outside) > 0 {
		return fmt.Errorf("%w: the declared files create schema(s) %s, which spec.schemas (%s) does not list; add them to spec.schemas or remove them from the files",
			ErrScope, strings.Join(outside, ", "), strings.Join(schemas, ", "))
	}
	return nil
}
