package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/migrate"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/memstore"
	"github.com/ptah-run/ptah/internal/store/pgstore"
)

// errState: ptah's own state in the target (the ptah schema) could not be
// read or created.
var errState = errors.New("ptah's state in the target database is unavailable")

// selection is the resources a command works on, each resolved to what the
// runner needs: the declared files read and the target URL found. Every
// configuration problem is found here, before any connection.
type selection struct {
	resources []*config.Resource
	inputs    []runner.Resource
}

// sources says what selecting does with a PtahMigration's source
// directory.
type sources int

const (
	// schemasOnly selects PtahSchema resources only (the commands that do
	// not work on migrations yet: history, forget).
	schemasOnly sources = iota
	// sourcesRequired reads every migration's source and refuses one that
	// does not read as a sequence (exit 18), before any connection: what
	// plan and apply need, since nothing can be planned or run from it.
	sourcesRequired
	// sourcesTolerated reads them too, but hands a source that does not
	// read to the runner (Resource.SourceErr) instead of refusing:
	// resolve-run works on the records, whatever the files say, and says
	// what its pass made of them.
	sourcesTolerated
	// sourcesUnread does not read them: the commands that only read or
	// write ptah's records (status, approve, forget, completion) need
	// nothing of the files, and must work whatever they hold.
	sourcesUnread
)

// selectResources selects the resources named (all when none) and
// resolves each. With schemasOnly it keeps to PtahSchema resources; else it
// selects resources of both kinds, a bare name selecting every kind that
// has it (PtahMigration/app names one).
func (a *app) selectResources(file string, names []string, how sources) (*selection, error) {
	f, err := config.Load(file)
	if err != nil {
		return nil, err
	}
	var resources []*config.Resource
	if how == schemasOnly {
		resources, err = f.Select(names)
	} else {
		resources, err = f.SelectAll(names)
	}
	if err != nil {
		return nil, err
	}
	return a.resolveAll(resources, how)
}

// resolveAll resolves every resource, reporting every problem at once.
func (a *app) resolveAll(resources []*config.Resource, how sources) (*selection, error) {
	var err error
	sel := &selection{resources: resources, inputs: make([]runner.Resource, len(resources))}
	var errs []error
	for i, r := range resources {
		sel.inputs[i], err = a.resolve(r, how)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sel, nil
}

// resolve reads a resource's declared files (or its migration source) and
// finds its target URL.
func (a *app) resolve(r *config.Resource, how sources) (runner.Resource, error) {
	in := runner.Resource{Schema: r.Schema, Migration: r.Migration}
	switch {
	case r.Migration != nil && how == sourcesUnread:
		in.SourceErr = errSourceUnread
	case r.Migration != nil:
		in.Source, in.SourceErr = readSource(r)
		if in.SourceErr != nil && how == sourcesRequired {
			return runner.Resource{}, in.SourceErr
		}
	default:
		files, err := r.SQLFiles()
		if err != nil {
			return runner.Resource{}, err
		}
		for _, f := range files {
			in.Files = append(in.Files, catalog.SourceFile{Name: f.Name, SQL: f.SQL})
		}
	}
	target, warning, err := r.ResolveURL(os.Getenv, postgres.CheckURL)
	if err != nil {
		return runner.Resource{}, err
	}
	a.secrets.addURL(target)
	if warning != "" {
		a.warn(warning)
	}
	in.TargetURL = target
	return in, nil
}

// errSourceUnread stands for a migration's source where the command did
// not read it: nothing it does may depend on the files.
var errSourceUnread = errors.New("this command does not read the migration source")

// readSource reads a PtahMigration's source directory, spec.source.path
// resolved against its ptah.yaml. Every error names the resource; each
// maps to exit 18 (a directory that cannot be listed at all, too).
func readSource(r *config.Resource) (*migrate.Source, error) {
	src, err := migrate.ReadDir(r.SourceDir(), layoutOf(r))
	if err == nil {
		return src, nil
	}
	if !errors.As(err, new(*migrate.SourceError)) {
		err = &sourceUnreadable{err: err}
	}
	return nil, fmt.Errorf("%s: %w", r.Ref(), err)
}

// sourceUnreadable: a migration's source directory could not be listed
// (missing, not a directory, not readable). It is a source problem like
// the others, with their exit code.
type sourceUnreadable struct{ err error }

func (e *sourceUnreadable) Error() string {
	return e.err.Error() + " (spec.source.path names the directory of versioned files, relative to ptah.yaml)"
}
func (e *sourceUnreadable) Unwrap() error { return e.err }

// targets are the open sessions on the databases of a selection: one
// connection, store and runner per distinct target URL.
type targets struct {
	byURL map[string]*runner.Runner
	conns []*pgx.Conn
}

// runnerOptions are what the governed commands set on every runner.
type runnerOptions struct {
	DevURL         string
	RunTimeout     time.Duration
	ObserveTimeout time.Duration
	// Cache keeps the desired state the declared files load to (nil: none).
	Cache catalog.DesiredCache
	// ReadOnly opens the stores without creating anything (status,
	// completion): a database where ptah recorded nothing gets an empty
	// store, which records nothing either.
	ReadOnly bool
}

// openTargets connects to every target of sel and opens ptah's store there
// (creating the ptah schema on first use, unless o.ReadOnly).
func (a *app) openTargets(ctx context.Context, sel *selection, o runnerOptions) (*targets, error) {
	t := &targets{byURL: map[string]*runner.Runner{}}
	for i, in := range sel.inputs {
		if _, ok := t.byURL[in.TargetURL]; ok {
			continue
		}
		conn, err := postgres.Connect(ctx, in.TargetURL)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("connecting to the target of %s: %w", sel.resources[i].Ref(), err)
		}
		t.conns = append(t.conns, conn)
		st, err := openStore(ctx, conn, o.ReadOnly)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("%w: opening schema ptah in the target of %s: %w", errState, sel.resources[i].Ref(), err)
		}
		r := &runner.Runner{Store: st, Target: conn, DevURL: o.DevURL, Version: versionString(),
			NewID: newID, RunTimeout: o.RunTimeout, ObserveTimeout: o.ObserveTimeout, OnWait: a.onWait,
			Cache: o.Cache, OnCacheError: a.onCacheError}
		t.byURL[in.TargetURL] = r
	}
	return t, nil
}

// openStore opens ptah's store in the target conn is connected to.
func openStore(ctx context.Context, conn *pgx.Conn, readOnly bool) (store.Store, error) {
	if !readOnly {
		return pgstore.New(ctx, conn)
	}
	st, err := pgstore.Open(ctx, conn)
	if errors.Is(err, pgstore.ErrNoStore) {
		return memstore.New(), nil // nothing recorded yet, and nothing to record
	}
	return st, err
}

// register records every selected resource before any pass runs, so each
// pass's census sees all of them.
func (t *targets) register(ctx context.Context, sel *selection) error {
	for i, in := range sel.inputs {
		r := t.byURL[in.TargetURL]
		identity, err := r.Identity(ctx)
		if err != nil {
			return err
		}
		if _, err := r.Register(ctx, in, identity); err != nil {
			return fmt.Errorf("registering %s: %w", sel.resources[i].Ref(), err)
		}
	}
	return nil
}

func (t *targets) runner(in runner.Resource) *runner.Runner { return t.byURL[in.TargetURL] }

func (t *targets) close() {
	for _, c := range t.conns {
		_ = c.Close(context.Background())
	}
}

// newID is a random operation or object suffix ID.
func newID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("reading random bytes: %v", err))
	}
	return hex.EncodeToString(b)
}
