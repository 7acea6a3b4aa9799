package catalog

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// readDeps reads pg_depend into Model.Deps, keeping only dependencies
// between objects of the model, and adds each object's dependency on its
// schema.
func (in *inspector) readDeps() error {
	rows, err := in.conn.Query(in.ctx, named("dependencies", depsQuery))
	if err != nil {
		return fmt.Errorf("reading dependencies: %w", err)
	}
	var objCat, refCat string
	var objOID, refOID uint32
	var objSub, refSub int32
	var normal bool
	var outside outsideCandidates
	dest := []any{&objCat, &objOID, &objSub, &refCat, &refOID, &refSub, &normal}
	_, err = pgx.ForEachRow(rows, dest, func() error {
		obj, ok1 := in.idOf(objCat, objOID, objSub)
		ref, ok2 := in.idOf(refCat, refOID, refSub)
		switch {
		case ok1 && ok2 && !isContainment(obj, ref) && !in.isOwnedBy(obj, ref):
			in.m.Deps = append(in.m.Deps, Dep{Object: obj, RefObject: ref})
		case !ok1 && ok2 && normal:
			// Only a normal dependency keeps PostgreSQL from dropping or
			// changing ref; what an auto or internal one ties goes with it.
			outside.add(objCat, objOID, objSub, ref)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading dependencies: %w", err)
	}
	if err := in.readOutside(outside); err != nil {
		return err
	}
	in.addSchemaDeps()
	return nil
}

// outsideCandidates are dependencies of objects the model does not hold
// on objects it holds: pg_depend rows whose object end mapped to no ID.
type outsideCandidates struct {
	catalogs []string
	oids     []uint32
	subs     []int32
	refs     []ID
}

func (o *outsideCandidates) add(catalog string, oid uint32, sub int32, ref ID) {
	o.catalogs, o.oids, o.subs = append(o.catalogs, catalog), append(o.oids, oid), append(o.subs, sub)
	o.refs = append(o.refs, ref)
}

// readOutside keeps, of the candidates, those that live outside the managed
// schemas, as Model.Outside. The rest are parts of managed objects the model
// leaves out (an identity's sequence, a foreign key's triggers, ...). It is
// one query whatever the count, run even when there is none.
func (in *inspector) readOutside(c outsideCandidates) error {
	managed := map[string]bool{"pg_toast": true}
	for _, s := range in.schemas {
		managed[s] = true
	}
	rows, err := in.conn.Query(in.ctx, named("objects outside the schemas", outsideQuery), c.catalogs, c.oids, c.subs)
	if err != nil {
		return fmt.Errorf("reading objects outside the managed schemas: %w", err)
	}
	var i int64
	var what, schema string
	_, err = pgx.ForEachRow(rows, []any{&i, &what, &schema}, func() error {
		if !managed[schema] {
			in.m.Outside = append(in.m.Outside, OutsideDep{Object: what, RefObject: c.refs[i-1]})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading objects outside the managed schemas: %w", err)
	}
	return nil
}

// idOf maps a pg_depend end (a catalog row and sub-object, a column number
// for pg_class) to the ID of the model object it is or stands for.
func (in *inspector) idOf(catalog string, oid uint32, sub int32) (ID, bool) {
	if r := in.rels[oid]; r != nil && catalog == "pg_class" {
		return in.columnID(r, sub), true
	}
	id, ok := in.objects[catalogKey{catalog, oid}]
	return id, ok
}

// columnID is the ID of column attnum of r (the relation itself when attnum
// is 0). Only a table's columns are objects (a partition's too): a view or
// composite type stands for its columns.
func (in *inspector) columnID(r *relation, attnum int32) ID {
	if name, ok := r.columns[int16(attnum)]; ok && attnum > 0 {
		return ColumnID(r.id.Schema, r.id.Name, name)
	}
	return r.id
}

// isOwnedBy says whether obj -> ref is a sequence's OWNED BY link to its
// column. That is Sequence.OwnedBy; as a dependency it would form a cycle
// with the column's default, which calls nextval on the sequence.
func (in *inspector) isOwnedBy(obj, ref ID) bool {
	return obj.Kind == KindSequence && ref.Kind == KindColumn && in.owners[obj] == ref
}

// isContainment says whether obj -> ref is no more than containment: an
// object on itself, or a table's column on its table (partition keys record
// one). The diff handles containment itself.
func isContainment(obj, ref ID) bool {
	if ref == obj {
		return true
	}
	return obj.Kind == KindColumn && ref.Kind == KindTable && ref.Schema == obj.Schema && ref.Name == obj.Name
}

// addSchemaDeps makes every object that lives in a managed schema depend on
// it, whether or not pg_depend recorded it.
func (in *inspector) addSchemaDeps() {
	managed := map[string]bool{}
	for _, s := range in.m.Schemas {
		managed[s.Name] = true
	}
	var ids []ID
	for _, x := range in.m.Extensions {
		ids = append(ids, x.ID())
		if managed[x.Schema] {
			in.m.Deps = append(in.m.Deps, Dep{Object: x.ID(), RefObject: ID{Kind: KindSchema, Name: x.Schema}})
		}
	}
	ids = appendIDs(ids, in.m.Enums)
	ids = appendIDs(ids, in.m.Domains)
	ids = appendIDs(ids, in.m.Composites)
	ids = appendIDs(ids, in.m.Sequences)
	ids = appendIDs(ids, in.m.Tables)
	ids = appendIDs(ids, in.m.Constraints)
	ids = appendIDs(ids, in.m.Indexes)
	ids = appendIDs(ids, in.m.Views)
	ids = appendIDs(ids, in.m.Functions)
	ids = appendIDs(ids, in.m.Triggers)
	ids = appendIDs(ids, in.m.Policies)
	ids = appendIDs(ids, in.m.Collations)
	ids = appendIDs(ids, in.m.TSConfigs)
	for _, id := range ids {
		if id.Schema != "" && managed[id.Schema] {
			in.m.Deps = append(in.m.Deps, Dep{Object: id, RefObject: ID{Kind: KindSchema, Name: id.Schema}})
		}
	}
}

func appendIDs[T interface{ ID() ID }](ids []ID, objects []T) []ID {
	for _, o := range objects {
		ids = append(ids, o.ID())
	}
	return ids
}

func compareIDs(a, b ID) int {
	return cmp.Or(
		cmp.Compare(a.Schema, b.Schema),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Sub, b.Sub),
		cmp.Compare(a.Kind, b.Kind),
	)
}

// byID orders objects by their ID, which is schema then name (then table
// and name for objects on a table, or arguments for overloads).
func byID[T interface{ ID() ID }](a, b T) int { return compareIDs(a.ID(), b.ID()) }

// sortModel orders every slice of m, so that two models read from equal
// databases are equal whatever order the catalog returned rows in.
func sortModel(m *Model) {
	slices.SortFunc(m.Schemas, byID)
	slices.SortFunc(m.Extensions, byID)
	slices.SortFunc(m.Enums, byID)
	slices.SortFunc(m.Domains, byID)
	slices.SortFunc(m.Composites, byID)
	slices.SortFunc(m.Sequences, byID)
	slices.SortFunc(m.Tables, byID)
	slices.SortFunc(m.Constraints, byID)
	slices.SortFunc(m.Indexes, byID)
	slices.SortFunc(m.Views, byID)
	slices.SortFunc(m.Functions, byID)
	slices.SortFunc(m.Triggers, byID)
	slices.SortFunc(m.Policies, byID)
	slices.SortFunc(m.Collations, byID)
	slices.SortFunc(m.TSConfigs, byID)
	slices.SortFunc(m.Deps, func(a, b Dep) int {
		return cmp.Or(compareIDs(a.Object, b.Object), compareIDs(a.RefObject, b.RefObject))
	})
	m.Deps = slices.Compact(m.Deps)
	slices.SortFunc(m.Outside, func(a, b OutsideDep) int {
		return cmp.Or(cmp.Compare(a.Object, b.Object), compareIDs(a.RefObject, b.RefObject))
	})
	m.Outside = slices.Compact(m.Outside)
}
