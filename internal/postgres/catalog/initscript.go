package catalog

import (
	"container/heap"
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ScriptFile is one file of a creation script: the statements of one kind
// of object in one schema, in the order they run.
type ScriptFile struct {
	// Schema is the schema the objects live in (a schema's own file: the
	// schema itself).
	Schema string
	// Kind names the objects, in the plural, as a file name may: schema,
	// extensions, types, sequences, functions, tables, constraints,
	// indexes, views, triggers, policies, grants.
	Kind       string
	Statements []string
}

// CreationScript returns the statements that take a database whose managed
// scope is base (a freshly created database's, as Inspect reads it) to
// desired, cut into files of one schema and one kind of object each, in an
// order that loads: every statement comes after what it depends on, in
// its own file or an earlier one. It is the plan Diff makes from base to
// desired, sorted with a preference for staying in the current file, so
// that a file is only started again (a second file of the same schema and
// kind) where a dependency goes back and forth between kinds.
//
// base must hold nothing desired does not: the script creates, it never
// drops.
func CreationScript(base, desired *Model) ([]ScriptFile, error) {
	if lv, dv := base.ServerVersion/10000, desired.ServerVersion/10000; lv != 0 && dv != 0 && lv != dv {
		return nil, fmt.Errorf("the source database runs PostgreSQL %d and the empty one PostgreSQL %d; both must run the same major", dv, lv)
	}
	d, err := prepareDiff(base, desired, DiffOptions{})
	if err != nil {
		return nil, err
	}
	for k, n := range d.nodes {
		if k.drop && len(n.stmts) > 0 {
			return nil, fmt.Errorf("the creation script would drop %s, which a new database has and the source database lacks; "+
				"drop it from the source database's managed schemas, or leave its schema out", describe(k.id))
		}
	}
	if len(d.labels) > 0 {
		return nil, fmt.Errorf("the creation script would alter an enum a new database has already; this is a bug")
	}
	return d.sortGrouped()
}

// scriptGroup is the file a node's statements go to.
type scriptGroup struct{ schema, kind string }

func (d *differ) groupOf(k nodeKey) scriptGroup {
	id := k.id
	schema := id.Schema
	switch id.Kind {
	case KindSchema:
		schema = id.Name
	case KindExtension:
		if e, ok := d.desired.byID[id].(Extension); ok {
			schema = e.Schema
		}
	}
	switch k.step {
	case stepGrants:
		return scriptGroup{schema, "grants"}
	case stepOwner:
		// OWNED BY waits for the column: it goes with its table.
		if s, ok := d.desired.byID[id].(Sequence); ok && s.OwnedBy != nil {
			return scriptGroup{s.OwnedBy.Schema, "tables"}
		}
	}
	return scriptGroup{schema, scriptKind(id.Kind)}
}

// scriptKind is the file a kind of object is declared in.
func scriptKind(k Kind) string {
	switch k {
	case KindSchema:
		return "schema"
	case KindExtension:
		return "extensions"
	case KindEnum, KindDomain, KindComposite, KindCollation:
		return "types"
	case KindSequence:
		return "sequences"
	case KindFunction, KindProcedure, KindAggregate:
		return "functions"
	case KindTSConfig:
		return "text_search"
	case KindTable, KindColumn:
		return "tables"
	case KindConstraint:
		return "constraints"
	case KindIndex:
		return "indexes"
	case KindView, KindMatView:
		return "views"
	case KindTrigger:
		return "triggers"
	case KindPolicy:
		return "policies"
	}
	return strings.ReplaceAll(string(k), " ", "_")
}

// sortGrouped orders the nodes into files. When the files' dependencies
// on each other have no cycle, each schema's objects of a kind go in one
// file, the files in an order their dependencies allow (the least object
// first, by nodeLess, where they leave a choice). When they have one (a
// function over a table of another schema whose tables use the function,
// say), a file is started again where it must: the nodes are sorted
// preferring, among the ready ones, those of the current file.
func (d *differ) sortGrouped() ([]ScriptFile, error) {
	flat, err := d.topo(func(nodeKey) scriptGroup { return scriptGroup{} })
	if err != nil {
		return nil, err
	}
	if order, ok := d.groupOrder(flat); ok {
		files := make([]ScriptFile, len(order))
		at := map[scriptGroup]int{}
		for i, g := range order {
			files[i], at[g] = ScriptFile{Schema: g.schema, Kind: g.kind}, i
		}
		for _, n := range flat {
			f := &files[at[d.groupOf(n.key)]]
			for _, s := range n.stmts {
				f.Statements = append(f.Statements, s.SQL)
			}
		}
		return nonEmpty(files), nil
	}
	grouped, err := d.topo(d.groupOf)
	if err != nil {
		return nil, err
	}
	var files []ScriptFile
	for _, n := range grouped {
		g := d.groupOf(n.key)
		if last := len(files) - 1; last < 0 || files[last].Schema != g.schema || files[last].Kind != g.kind {
			files = append(files, ScriptFile{Schema: g.schema, Kind: g.kind})
		}
		f := &files[len(files)-1]
		for _, s := range n.stmts {
			f.Statements = append(f.Statements, s.SQL)
		}
	}
	return nonEmpty(files), nil
}

// nonEmpty drops the files of nodes without statements.
func nonEmpty(files []ScriptFile) []ScriptFile {
	out := files[:0]
	for _, f := range files {
		if len(f.Statements) > 0 {
			out = append(out, f)
		}
	}
	return out
}

// groupOrder orders the files of the nodes (flat is them sorted): ok is
// false when the files depend on each other in a cycle. Among the files
// ready, the one whose least node is least comes first.
func (d *differ) groupOrder(flat []*node) ([]scriptGroup, bool) {
	first := map[scriptGroup]*node{}
	for _, n := range flat {
		g := d.groupOf(n.key)
		if f, ok := first[g]; !ok || d.nodeLess(n, f) {
			first[g] = n
		}
	}
	after := map[scriptGroup]map[scriptGroup]bool{}
	indeg := map[scriptGroup]int{}
	for a, succ := range d.edges {
		ga := d.groupOf(a)
		for b := range succ {
			gb := d.groupOf(b)
			if ga == gb || after[ga][gb] {
				continue
			}
			if after[ga] == nil {
				after[ga] = map[scriptGroup]bool{}
			}
			after[ga][gb] = true
			indeg[gb]++
		}
	}
	var order []scriptGroup
	done := map[scriptGroup]bool{}
	for len(order) < len(first) {
		var next *scriptGroup
		for g, n := range first {
			if done[g] || indeg[g] > 0 {
				continue
			}
			if next == nil || d.nodeLess(n, first[*next]) {
				g := g
				next = &g
			}
		}
		if next == nil {
			return nil, false
		}
		done[*next] = true
		order = append(order, *next)
		for b := range after[*next] {
			indeg[b]--
		}
	}
	return order, true
}

// topo sorts the nodes topologically, choosing among the ready nodes one
// of the current group as long as there is one, else the least ready node
// (nodeLess), whose group becomes the current one. Each group's nodes wait
// in a heap of their own.
func (d *differ) topo(groupOf func(nodeKey) scriptGroup) ([]*node, error) {
	indeg := map[nodeKey]int{}
	for _, succ := range d.edges {
		for b := range succ {
			indeg[b]++
		}
	}
	ready := map[scriptGroup]*readyNodes{}
	push := func(n *node) {
		g := groupOf(n.key)
		h := ready[g]
		if h == nil {
			h = &readyNodes{less: d.nodeLess}
			ready[g] = h
		}
		heap.Push(h, n)
	}
	for k, n := range d.nodes {
		if indeg[k] == 0 {
			push(n)
		}
	}
	var (
		out     []*node
		current scriptGroup
	)
	for {
		h := ready[current]
		if h == nil || h.Len() == 0 {
			var best *node
			for g, hg := range ready {
				if hg.Len() == 0 {
					continue
				}
				if n := hg.nodes[0]; best == nil || d.nodeLess(n, best) {
					best, current = n, g
				}
			}
			if best == nil {
				break
			}
			h = ready[current]
		}
		n := heap.Pop(h).(*node)
		out = append(out, n)
		for b := range d.edges[n.key] {
			if indeg[b]--; indeg[b] == 0 {
				push(d.nodes[b])
			}
		}
	}
	if len(out) != len(d.nodes) {
		var stuck []string
		for k := range d.nodes {
			if indeg[k] > 0 {
				stuck = append(stuck, describe(k.id))
			}
		}
		sort.Strings(stuck)
		return nil, fmt.Errorf("cannot order the creation script: circular dependency among %s", strings.Join(stuck, ", "))
	}
	return out, nil
}

// SQL is the file's text: each statement ended by a semicolon, a blank
// line between them.
//
// A file of functions first turns off the checking of function bodies, as
// ptah does when it applies a plan: PostgreSQL records no dependency on
// what a body names, so a body may name a table created after it.
func (f ScriptFile) SQL() string {
	var b strings.Builder
	if f.Kind == "functions" {
		b.WriteString("-- A function's body may name objects created in later files.\n")
		b.WriteString("SET check_function_bodies = false;\n\n")
	}
	for i, s := range f.Statements {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(strings.TrimRight(s, "; \n\t"))
		b.WriteString(";\n")
	}
	return b.String()
}

// ManageableSchemas lists the schemas of the database conn is connected
// to that ptah may manage, in name order: all but the system schemas,
// ptah's own, and those an extension created.
func ManageableSchemas(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	rows, err := conn.Query(ctx, named("manageable schemas", `
SELECT n.nspname FROM pg_namespace n
WHERE n.nspname NOT LIKE 'pg\_%' AND n.nspname NOT IN ('information_schema', 'ptah')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d
                  WHERE d.classid = 'pg_namespace'::regclass AND d.objid = n.oid AND d.deptype = 'e')
ORDER BY 1`))
	if err != nil {
		return nil, fmt.Errorf("listing the database's schemas: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing the database's schemas: %w", err)
	}
	return names, nil
}
