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

func (a *app) selectResources(file string, names []string) (*selection, error) {
	f, err := config.Load(file)
	if err != nil {
		return nil, err
	}
	resources, err := f.Select(names)
	if err != nil {
		return nil, err
	}
	sel := &selection{resources: resources, inputs: make([]runner.Resource, len(resources))}
	var errs []error
	for i, r := range resources {
		sel.inputs[i], err = a.resolve(r)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sel, nil
}

// resolve reads a resource's declared files and finds its target URL.
func (a *app) resolve(r *config.Resource) (runner.Resource, error) {
	files, err := r.SQLFiles()
	if err != nil {
		return runner.Resource{}, err
	}
	target, warning, err := r.ResolveURL(os.Getenv, postgres.CheckURL)
	if err != nil {
		return runner.Resource{}, err
	}
	a.secrets.addURL(target)
	if warning != "" {
		a.warn(warning)
	}
	in := runner.Resource{Schema: r.Schema, TargetURL: target}
	for _, f := range files {
		in.Files = append(in.Files, catalog.SourceFile{Name: f.Name, SQL: f.SQL})
	}
	return in, nil
}

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
			NewID: newID, RunTimeout: o.RunTimeout, ObserveTimeout: o.ObserveTimeout, OnWait: a.onWait}
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
