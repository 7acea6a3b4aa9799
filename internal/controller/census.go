// The realm census in a cluster, and what a coordination key is scoped to.

package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/runner"
	"github.com/ptah-run/ptah/internal/store"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// resolveScope finds what the resource's coordination key is scoped to,
// and where its database's Lease lives (see scopeOf).
func (p *pass) resolveScope(ctx context.Context) error {
	realms, err := p.realms(ctx)
	if err != nil {
		return err
	}
	p.scope, p.leaseNS = scopeOf(realms, p.obj.Namespace, p.spec.Target.CoordinationKey), p.obj.Namespace
	if strings.HasPrefix(p.scope, "realm/") {
		p.leaseNS = cmp.Or(p.r.Namespace, p.obj.Namespace)
	}
	return nil
}

func (p *pass) realms(ctx context.Context) ([]api.PtahRealm, error) {
	snap, err := p.read(ctx)
	if err != nil {
		return nil, err
	}
	return snap.realms, nil
}

// read takes the pass's snapshot of the cluster on first use.
func (p *pass) read(ctx context.Context) (*snapshot, error) {
	if p.snapshot != nil {
		return p.snapshot, nil
	}
	snap := &snapshot{}
	var err error
	if p.r.Fence != nil {
		snap.stored, err = p.r.Fence.Stored(ctx)
	} else {
		_, snap.stored, err = runner.StoredState(ctx, p.r.Store)
	}
	if err != nil {
		return nil, err
	}
	var realms api.PtahRealmList
	if err := p.r.Client.List(ctx, &realms); err != nil {
		return nil, fmt.Errorf("reading the PtahRealms: %w", err)
	}
	snap.realms = realms.Items
	for _, kind := range []string{api.KindPtahSchema, api.KindPtahMigration} {
		objs, err := p.r.Store.List(ctx, store.ListOptions{Kind: kind})
		if err != nil {
			return nil, fmt.Errorf("taking the realm census: %w", err)
		}
		snap.claimers = append(snap.claimers, objs...)
	}
	p.snapshot = snap
	return snap, nil
}

// scopeOf is what a coordination key named in namespace is scoped to in
// the cluster: the PtahRealm that names the key and the namespace, else
// the namespace alone.
func scopeOf(realms []api.PtahRealm, namespace, key string) string {
	for _, r := range realms {
		if key != "" && r.Spec.CoordinationKey == key && slices.Contains(r.Spec.Namespaces, namespace) {
			return "realm/" + r.Name
		}
	}
	return "namespace/" + namespace
}

// ScopedKey is the coordination key a reading fingerprints, in a cluster.
func ScopedKey(scope, key string) string {
	if key == "" {
		return ""
	}
	return scope + "/" + key
}

// census is every PtahSchema and PtahMigration of the cluster as a
// claimant of its database, and this resource among them. A resource's
// coordination digest follows from its spec when it names a key (scoped
// as its reading scopes it); else, like its target's identity, from its
// latest reading (status.target). One never read, without a key, is not
// counted: it has dispatched nothing.
func (p *pass) census(ctx context.Context, rs runState) ([]engine.Claimant, engine.Claimant, error) {
	realms, err := p.realms(ctx)
	if err != nil {
		return nil, engine.Claimant{}, err
	}
	claimant := func(kind, ns, name string, target api.Target, observed *api.ObservedTarget) engine.Claimant {
		c := engine.Claimant{Kind: kind, Namespace: ns, Name: name, SharedRealm: target.SharedRealm}
		if observed != nil {
			c.CoordinationDigest, c.TargetIdentityDigest = observed.CoordinationDigest, observed.TargetIdentityDigest
		}
		if target.CoordinationKey != "" {
			target.CoordinationKey = ScopedKey(scopeOf(realms, ns, target.CoordinationKey), target.CoordinationKey)
			c.CoordinationDigest = runner.CoordinationDigest(api.PtahSchemaSpec{Target: target}, c.TargetIdentityDigest)
		}
		return c
	}
	self := claimant(p.r.Kind, p.obj.Namespace, p.obj.Name, p.spec.Target, rs.Target)
	realm := []engine.Claimant{self}
	snap, err := p.read(ctx)
	if err != nil {
		return nil, self, err
	}
	for _, o := range snap.claimers {
		if o.Kind == self.Kind && o.Namespace == self.Namespace && o.Name == self.Name {
			continue
		}
		var spec struct {
			Target api.Target `json:"target"`
		}
		var status api.RunState
		if json.Unmarshal(o.Spec, &spec) != nil || len(o.Status) > 0 && json.Unmarshal(o.Status, &status) != nil {
			continue
		}
		c := claimant(o.Kind, o.Namespace, o.Name, spec.Target, status.Target)
		if c.CoordinationDigest != "" {
			realm = append(realm, c)
		}
	}
	return realm, self, nil
}
