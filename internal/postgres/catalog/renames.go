package catalog

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/script"
)

// Renames. A declared schema says what the database should be, not how it
// got there, so a table or column that changed its name reads as one
// dropped (its data with it) and one added. A directive beside it in the
// declared file says otherwise:
//
//	CREATE TABLE posts ( -- ptah:renamed-from articles
//	    id bigint PRIMARY KEY,
//	    content text NOT NULL -- ptah:renamed-from body
//	);
//
// A directive names the object whose definition starts on its line (before
// it), or, alone on its line, on the next line that holds SQL: a CREATE
// TABLE, or one of the column definitions in its parentheses.
//
// While the target still has the old name and not the new one, the plan
// renames it: the renames are undone in the dev database, which PostgreSQL
// then describes with the old names everywhere they appear (a view's text,
// an index's definition, a foreign key's columns), the plan is computed
// from the target to that, and the renames close it. The objects
// PostgreSQL named after a renamed table or column (its key's constraint
// and index, a serial's sequence, an unnamed index) follow it when the
// target has them under the old name. Once applied, or when the old name
// is gone, a directive does nothing: it can stay in the file.

// renameDirective is one `-- ptah:renamed-from OLD` of a declared file.
type renameDirective struct {
	File string
	Line int
	// Schema is as the CREATE TABLE wrote it ("" when unqualified), Table
	// the table's declared name, Column the column's ("" for the table).
	Schema, Table, Column string
	Old                   string
}

func (r renameDirective) where() string { return fmt.Sprintf("%s:%d", r.File, r.Line) }

// Rename is one rename a plan makes: a declared one (Declared says where)
// or one that follows it.
type Rename struct {
	// Kind is KindTable, KindColumn, KindConstraint, KindIndex or
	// KindSequence.
	Kind   Kind
	Schema string
	// Table is, for a column or constraint, its table's new name.
	Table    string
	Old, New string
	// Declared is the directive's place, file:line; "" for a rename that
	// follows a declared one.
	Declared string
}

var directiveRE = regexp.MustCompile(`^--\s*ptah:(\S*)\s*(.*?)\s*$`)

// readRenames reads the rename directives of the declared files.
func readRenames(files []SourceFile) ([]renameDirective, error) {
	var out []renameDirective
	for _, f := range files {
		if !strings.Contains(f.SQL, "ptah:") {
			continue
		}
		ds, err := fileRenames(f)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// renameTarget is a definition a directive can stand beside.
type renameTarget struct {
	schema, table, column string
	line                  int
}

func fileRenames(f SourceFile) ([]renameDirective, error) {
	var toks []script.Token
	stmts, err := script.Options{OnToken: func(t script.Token) { toks = append(toks, t) }}.Split(f.SQL)
	if err != nil {
		return nil, nil // the dev database reports it, placed in the file
	}
	line := lineIndex(f.SQL)
	// The definitions, by the line they start on, and the lines holding
	// SQL (not only comments).
	starts := map[int][]renameTarget{}
	code := map[int]bool{}
	for _, t := range toks {
		if t.Kind != script.Comment {
			code[line(t.Start)] = true
		}
	}
	ti := 0
	for _, st := range stmts {
		var own []script.Token
		for ; ti < len(toks) && toks[ti].Start < st.End; ti++ {
			if toks[ti].Start >= st.Start && toks[ti].Kind != script.Comment {
				own = append(own, toks[ti])
			}
		}
		for _, d := range tableDefinitions(f.SQL, own, line) {
			starts[d.line] = append(starts[d.line], d)
		}
	}
	lastLine := line(len(f.SQL))
	var out []renameDirective
	for ci, t := range toks {
		if t.Kind != script.Comment {
			continue
		}
		text := f.SQL[t.Start:t.End]
		at := line(t.Start)
		if strings.HasPrefix(text, "/*") {
			if strings.Contains(text, "ptah:") {
				return nil, &LoadError{File: f.Name, Line: at, Column: 1, Message: "a ptah: directive is a -- comment of its own; ptah does not read one inside /* */"}
			}
			continue
		}
		m := directiveRE.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		bad := func(format string, args ...any) error {
			return &LoadError{File: f.Name, Line: at, Column: 1, Message: fmt.Sprintf(format, args...)}
		}
		if m[1] != "renamed-from" {
			return nil, bad("unknown directive ptah:%s; the one ptah reads is -- ptah:renamed-from OLD_NAME", m[1])
		}
		old, ok := directiveName(m[2])
		if !ok {
			return nil, bad("-- ptah:renamed-from takes one name, the object's old name (double-quoted when PostgreSQL needs it to be), not %q", m[2])
		}
		// The definition it stands beside: on its own line, before it;
		// else, alone on its line, on the next line that holds SQL.
		l := at
		if !codeBefore(toks[:ci], line, at) {
			for l = at + 1; l <= lastLine && !code[l]; l++ {
			}
		}
		targets := starts[l]
		switch {
		case len(targets) == 0:
			return nil, bad("-- ptah:renamed-from %s is not beside a CREATE TABLE or a column definition; put it at the end of the line where the table's or column's definition starts", m[2])
		case len(targets) > 1:
			return nil, bad("-- ptah:renamed-from %s is beside the definitions of several objects (line %d); put each on a line of its own", m[2], l)
		}
		d := targets[0]
		out = append(out, renameDirective{File: f.Name, Line: at, Schema: d.schema, Table: d.table, Column: d.column, Old: old})
	}
	return out, nil
}

// codeBefore reports whether the tokens before a comment on line at hold
// SQL on that line.
func codeBefore(before []script.Token, line func(int) int, at int) bool {
	for i := len(before) - 1; i >= 0 && line(before[i].End) == at; i-- {
		if before[i].Kind != script.Comment {
			return true
		}
	}
	return false
}

// lineIndex returns the function giving the 1-based line of a byte offset
// of src.
func lineIndex(src string) func(int) int {
	starts := []int{0}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			starts = append(starts, i+1)
		}
	}
	return func(off int) int {
		l, _ := slices.BinarySearch(starts, off+1)
		return l
	}
}

// directiveName reads a directive's argument, an identifier as SQL writes
// it: folded to lower case unless double-quoted.
func directiveName(s string) (string, bool) {
	if strings.HasPrefix(s, `"`) {
		if len(s) < 2 || !strings.HasSuffix(s, `"`) {
			return "", false
		}
		inner := s[1 : len(s)-1]
		if strings.Contains(strings.ReplaceAll(inner, `""`, ""), `"`) || inner == "" {
			return "", false
		}
		return strings.ReplaceAll(inner, `""`, `"`), true
	}
	if s == "" || !isIdentStartChar(s[0]) {
		return "", false
	}
	for i := 1; i < len(s); i++ {
		if !isIdentStartChar(s[i]) && !(s[i] >= '0' && s[i] <= '9') && s[i] != '$' {
			return "", false
		}
	}
	return strings.ToLower(s), true
}

func isIdentStartChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

// tableDefinitions finds, in one statement's tokens, a CREATE TABLE's
// table and the column definitions in its parentheses, each with the line
// it starts on. Any other statement defines nothing a directive can name.
func tableDefinitions(src string, toks []script.Token, lineOf func(int) int) []renameTarget {
	text := func(i int) string { return src[toks[i].Start:toks[i].End] }
	word := func(i int) string {
		if i < len(toks) && toks[i].Kind == script.Word {
			return strings.ToLower(text(i))
		}
		return ""
	}
	if word(0) != "create" {
		return nil
	}
	i := 1
	for slices.Contains([]string{"global", "local", "temporary", "temp", "unlogged"}, word(i)) {
		i++
	}
	if word(i) != "table" {
		return nil
	}
	i++
	if word(i) == "if" && word(i+1) == "not" && word(i+2) == "exists" {
		i += 3
	}
	name := func(i int) (string, bool) {
		if i >= len(toks) {
			return "", false
		}
		if toks[i].Kind == script.Word {
			return strings.ToLower(text(i)), true
		}
		if t := text(i); toks[i].Kind == script.Other && strings.HasPrefix(t, `"`) {
			return strings.ReplaceAll(t[1:len(t)-1], `""`, `"`), true
		}
		return "", false
	}
	line := func(i int) int { return lineOf(toks[i].Start) }
	first, ok := name(i)
	if !ok {
		return nil
	}
	table := renameTarget{table: first, line: line(0)}
	i++
	if i+1 < len(toks) && text(i) == "." {
		second, ok := name(i + 1)
		if !ok {
			return nil
		}
		table.schema, table.table = first, second
		i += 2
	}
	out := []renameTarget{table}
	if i >= len(toks) || text(i) != "(" {
		return out // AS, PARTITION OF, OF: no column definitions of its own
	}
	depth, elementStart := 0, true
	for ; i < len(toks); i++ {
		switch t := text(i); {
		case t == "(":
			depth++
			if depth == 1 {
				elementStart = true
				continue
			}
		case t == ")":
			depth--
			if depth == 0 {
				return out
			}
		case t == "," && depth == 1:
			elementStart = true
			continue
		}
		if elementStart && depth == 1 {
			elementStart = false
			switch word(i) {
			case "constraint", "primary", "unique", "check", "foreign", "exclude", "like":
				continue // a table constraint, or LIKE: no column of its own
			}
			if col, ok := name(i); ok {
				out = append(out, renameTarget{schema: table.schema, table: table.table, column: col, line: line(i)})
			}
		}
	}
	return out
}

// resolveRenames decides which directives the plan from live to desired
// carries out, adding the renames that follow them. A directive is
// carried out while live has the old name and not the new one; it is an
// error for the declared files to define both.
func resolveRenames(ds []renameDirective, live, desired *Model) ([]Rename, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	lv, dv := indexModel(live), indexModel(desired)
	var out []Rename
	claimed := map[ID]string{} // a desired object, or a live one, to the directive that names it
	claim := func(id ID, d renameDirective) error {
		if prev, ok := claimed[id]; ok {
			return fmt.Errorf("%s: -- ptah:renamed-from names the same %s as the directive at %s; keep one", d.where(), strings.TrimPrefix(string(id.Kind), "old "), prev)
		}
		claimed[id] = d.where()
		return nil
	}
	tableRenamed := map[ObjectName]string{} // desired table -> its live (old) name, when renamed
	// Tables first: a column's directive looks for its table under the
	// old name.
	for _, pass := range []bool{true, false} {
		for _, d := range ds {
			if (d.Column == "") != pass {
				continue
			}
			schema, err := directiveSchema(d, desired)
			if err != nil {
				return nil, err
			}
			table := ID{Kind: KindTable, Schema: schema, Name: d.Table}
			if d.Column == "" {
				if err := claim(table, d); err != nil {
					return nil, err
				}
				old := ID{Kind: KindTable, Schema: schema, Name: d.Old}
				if _, ok := dv.byID[old]; ok {
					return nil, fmt.Errorf("%s: table %s is declared renamed from %s, which the declared files also create; remove one of them, or the directive",
						d.where(), qname(schema, d.Table), qname(schema, d.Old))
				}
				if err := claim(ID{Kind: "old " + KindTable, Schema: schema, Name: d.Old}, d); err != nil {
					return nil, err
				}
				if _, ok := lv.byID[old]; !ok || relationID(lv, table) != nil {
					continue // done already, or nothing to rename
				}
				tableRenamed[ObjectName{schema, d.Table}] = d.Old
				out = append(out, Rename{Kind: KindTable, Schema: schema, Old: d.Old, New: d.Table, Declared: d.where()})
				continue
			}
			col := ColumnID(schema, d.Table, d.Column)
			if _, ok := dv.columns[col]; !ok {
				return nil, fmt.Errorf("%s: the declared table %s has no column %s once the declared files have run; the directive names a column it keeps",
					d.where(), qname(schema, d.Table), ident(d.Column))
			}
			if err := claim(col, d); err != nil {
				return nil, err
			}
			if _, ok := dv.columns[ColumnID(schema, d.Table, d.Old)]; ok {
				return nil, fmt.Errorf("%s: column %s of table %s is declared renamed from %s, which the table also has; remove one of them, or the directive",
					d.where(), ident(d.Column), qname(schema, d.Table), ident(d.Old))
			}
			if err := claim(ColumnID(schema, d.Table, "old "+d.Old), d); err != nil {
				return nil, err
			}
			liveTable := d.Table
			if old, ok := tableRenamed[ObjectName{schema, d.Table}]; ok {
				liveTable = old
			}
			_, hasOld := lv.columns[ColumnID(schema, liveTable, d.Old)]
			_, hasNew := lv.columns[ColumnID(schema, liveTable, d.Column)]
			if !hasOld || hasNew {
				continue
			}
			out = append(out, Rename{Kind: KindColumn, Schema: schema, Table: d.Table, Old: d.Old, New: d.Column, Declared: d.where()})
		}
	}
	return append(out, followingRenames(out, tableRenamed, lv, dv)...), nil
}

// directiveSchema is the schema of a directive's table: as written, or
// the one managed schema whose declared tables have that name.
func directiveSchema(d renameDirective, desired *Model) (string, error) {
	var found []string
	for _, t := range desired.Tables {
		if t.Name == d.Table && (d.Schema == "" || t.Schema == d.Schema) {
			found = append(found, t.Schema)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0:
		return "", fmt.Errorf("%s: -- ptah:renamed-from is beside table %s, which the declared files do not leave in the managed schemas",
			d.where(), ident(d.Table))
	}
	return "", fmt.Errorf("%s: -- ptah:renamed-from is beside table %s, which is in several managed schemas (%s); qualify its name in the CREATE TABLE",
		d.where(), ident(d.Table), strings.Join(found, ", "))
}

// followingRenames are the renames of the objects PostgreSQL named after
// a renamed table or column ("<table>_pkey", "<table>_<column>_key",
// "<table>_<column>_seq", "<table>_<column>_idx"): a desired constraint,
// index or sequence of the renamed table whose name, with the new names
// put back to the old ones, is a live one of that table that the declared
// files do not also define.
func followingRenames(declared []Rename, tableRenamed map[ObjectName]string, lv, dv objects) []Rename {
	columns := map[ObjectName][][2]string{} // desired table -> (old, new) column names
	for _, r := range declared {
		if r.Kind == KindColumn {
			t := ObjectName{r.Schema, r.Table}
			columns[t] = append(columns[t], [2]string{r.Old, r.New})
		}
	}
	oldName := func(t ObjectName, name string) (string, bool) {
		changed := false
		if old, ok := tableRenamed[t]; ok && strings.HasPrefix(name, t.Name+"_") {
			name, changed = old+name[len(t.Name):], true
		}
		for _, c := range columns[t] {
			if i := strings.Index(name+"_", "_"+c[1]+"_"); i >= 0 {
				name, changed = name[:i]+"_"+c[0]+name[i+len(c[1])+1:], true
			}
		}
		return name, changed
	}
	liveTable := func(t ObjectName) string {
		if old, ok := tableRenamed[t]; ok {
			return old
		}
		return t.Name
	}
	var out []Rename
	seen := map[ID]bool{}
	follow := func(kind Kind, t ObjectName, name string, liveID, desiredID func(string) ID, onTable func(any, string) bool) {
		old, ok := oldName(t, name)
		if !ok || old == name || seen[liveID(old)] {
			return
		}
		lo, ok := lv.byID[liveID(old)]
		if !ok || !onTable(lo, liveTable(t)) {
			return
		}
		if _, taken := dv.byID[desiredID(old)]; taken || relationID(dv, ID{Kind: kind, Schema: t.Schema, Name: old}) != nil && kind != KindConstraint {
			return
		}
		seen[liveID(old)] = true
		out = append(out, Rename{Kind: kind, Schema: t.Schema, Table: t.Name, Old: old, New: name})
	}
	renamedTables := map[ObjectName]bool{}
	for t := range tableRenamed {
		renamedTables[t] = true
	}
	for t := range columns {
		renamedTables[t] = true
	}
	for _, c := range dv.m.Constraints {
		t := ObjectName{c.Schema, c.Table}
		if !renamedTables[t] || c.Parent != "" {
			continue
		}
		follow(KindConstraint, t, c.Name,
			func(n string) ID { return ID{Kind: KindConstraint, Schema: c.Schema, Name: liveTable(t), Sub: n} },
			func(n string) ID { return ID{Kind: KindConstraint, Schema: c.Schema, Name: c.Table, Sub: n} },
			func(o any, table string) bool { lc, ok := o.(Constraint); return ok && lc.Type == c.Type })
	}
	for _, ix := range dv.m.Indexes {
		t := ObjectName{ix.Schema, ix.Table}
		if !renamedTables[t] || ix.Parent != nil {
			continue
		}
		follow(KindIndex, t, ix.Name,
			func(n string) ID { return ID{Kind: KindIndex, Schema: ix.Schema, Name: n} },
			func(n string) ID { return ID{Kind: KindIndex, Schema: ix.Schema, Name: n} },
			func(o any, table string) bool { li, ok := o.(Index); return ok && li.Table == table })
	}
	// From PostgreSQL 18 on, a NOT NULL is a constraint, named after its
	// table and column unless declared otherwise.
	for _, t := range dv.m.Tables {
		tn := ObjectName{t.Schema, t.Name}
		if !renamedTables[tn] || dv.m.ServerVersion < 180000 {
			continue
		}
		for _, c := range t.Columns {
			oldCol := c.Name
			for _, cr := range columns[tn] {
				if cr[1] == c.Name {
					oldCol = cr[0]
				}
			}
			lc, ok := lv.columns[ColumnID(t.Schema, liveTable(tn), oldCol)]
			if !c.NotNull || c.NotNullName != "" || !ok || !lc.NotNull || lc.NotNullName != "" {
				continue // not both under the names PostgreSQL gives
			}
			from, to := defaultNotNullName(liveTable(tn), oldCol), defaultNotNullName(t.Name, c.Name)
			if from != to {
				out = append(out, Rename{Kind: KindConstraint, Schema: t.Schema, Table: t.Name, Old: from, New: to})
			}
		}
	}
	for _, s := range dv.m.Sequences {
		if s.OwnedBy == nil {
			continue
		}
		t := ObjectName{s.OwnedBy.Schema, s.OwnedBy.Table}
		if !renamedTables[t] || s.Schema != t.Schema {
			continue
		}
		follow(KindSequence, t, s.Name,
			func(n string) ID { return ID{Kind: KindSequence, Schema: s.Schema, Name: n} },
			func(n string) ID { return ID{Kind: KindSequence, Schema: s.Schema, Name: n} },
			func(o any, table string) bool {
				ls, ok := o.(Sequence)
				return ok && ls.OwnedBy != nil && ls.OwnedBy.Schema == t.Schema && ls.OwnedBy.Table == table
			})
	}
	return out
}

// undoRenames are the statements that give the dev database's objects
// their old names: the followers first, then the columns, then the
// tables, each object named as it is then.
func undoRenames(rs []Rename) []string {
	var out []string
	for _, kind := range []Kind{KindConstraint, KindIndex, KindSequence, KindColumn, KindTable} {
		for _, r := range rs {
			if r.Kind == kind {
				out = append(out, renameSQL(r, r.New, r.Old))
			}
		}
	}
	return out
}

// doRenames are the statements that rename the target's objects: the
// tables first, then the columns, then their followers, each named as it
// is then.
func doRenames(rs []Rename) []Rename {
	var out []Rename
	for _, kind := range []Kind{KindTable, KindColumn, KindConstraint, KindIndex, KindSequence} {
		for _, r := range rs {
			if r.Kind == kind {
				out = append(out, r)
			}
		}
	}
	return out
}

// renameSQL renames r's object from one name to another. A table's other
// objects are named under its new name: the tables are renamed first, and
// undone last.
func renameSQL(r Rename, from, to string) string {
	switch r.Kind {
	case KindTable:
		return fmt.Sprintf("ALTER TABLE %s RENAME TO %s", qname(r.Schema, from), ident(to))
	case KindColumn:
		return fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", qname(r.Schema, r.Table), ident(from), ident(to))
	case KindConstraint:
		return fmt.Sprintf("ALTER TABLE %s RENAME CONSTRAINT %s TO %s", qname(r.Schema, r.Table), ident(from), ident(to))
	case KindIndex:
		return fmt.Sprintf("ALTER INDEX %s RENAME TO %s", qname(r.Schema, from), ident(to))
	default:
		return fmt.Sprintf("ALTER SEQUENCE %s RENAME TO %s", qname(r.Schema, from), ident(to))
	}
}

// renames are the statements that carry out rs, with their locks: a
// rename is a catalog update, over as soon as it has its lock.
func (d *differ) renames(rs []Rename) []postgres.Statement {
	var out []postgres.Statement
	liveTable := map[ObjectName]string{}
	for _, r := range rs {
		if r.Kind == KindTable {
			liveTable[ObjectName{r.Schema, r.New}] = r.Old
		}
	}
	for _, r := range doRenames(rs) {
		l := &lockList{d: d}
		table := ID{Kind: KindTable, Schema: r.Schema, Name: r.Table}
		if old, ok := liveTable[ObjectName{r.Schema, r.Table}]; ok {
			table.Name = old
		}
		switch r.Kind {
		case KindTable:
			l.add(ID{Kind: KindTable, Schema: r.Schema, Name: r.Old}, postgres.AccessExclusive)
		case KindColumn:
			// The partitions' columns are renamed with it.
			d.onPartitions(l, table, postgres.AccessExclusive)
		case KindConstraint:
			l.add(table, postgres.AccessExclusive)
			if c, ok := d.live.byID[ID{Kind: KindConstraint, Schema: r.Schema, Name: table.Name, Sub: r.Old}].(Constraint); ok &&
				(c.Type == PrimaryKey || c.Type == Unique || c.Type == Exclusion) {
				l.add(ID{Kind: KindIndex, Schema: r.Schema, Name: r.Old}, postgres.ShareUpdateExclusive)
			}
		case KindIndex:
			l.add(ID{Kind: KindIndex, Schema: r.Schema, Name: r.Old}, postgres.ShareUpdateExclusive)
		case KindSequence:
			l.add(ID{Kind: KindSequence, Schema: r.Schema, Name: r.Old}, postgres.AccessExclusive)
		}
		st := postgres.Statement{SQL: renameSQL(r, r.Old, r.New), Locks: l.locks}
		for _, lk := range l.locks {
			st.LockKeys = append(st.LockKeys, lk.Relation)
		}
		out = append(out, st)
	}
	return out
}

// renameHints are, for a plan that drops a table or column and adds one
// of the same shape beside it, the directive that would make it a rename
// instead.
func (d *differ) renameHints() []string {
	var hints []string
	sameColumns := func(a, b Table) bool {
		return slices.EqualFunc(a.Columns, b.Columns, func(x, y Column) bool { return x.Name == y.Name && x.Type == y.Type })
	}
	for _, lt := range d.live.m.Tables {
		if _, kept := d.desired.byID[lt.ID()]; kept {
			d.columnHints(&hints, lt)
			continue
		}
		for _, dt := range d.desired.m.Tables {
			if _, existed := d.live.byID[dt.ID()]; !existed && dt.Schema == lt.Schema && len(dt.Columns) > 0 && sameColumns(lt, dt) {
				hints = append(hints, fmt.Sprintf("table %s is dropped and table %s created with the same columns: if %s is %s renamed, "+
					"say so beside its CREATE TABLE (-- ptah:renamed-from %s) rather than allow the drop",
					qname(lt.Schema, lt.Name), qname(dt.Schema, dt.Name), ident(dt.Name), ident(lt.Name), ident(lt.Name)))
				break
			}
		}
	}
	return hints
}

// columnHints adds the hints for the columns of table t, which the plan
// keeps: a dropped column and an added one of the same type, when that
// type makes the pair unambiguous.
func (d *differ) columnHints(hints *[]string, t Table) {
	dt := d.desired.byID[t.ID()].(Table)
	byType := func(from, other Table, m objects) map[string][]Column {
		out := map[string][]Column{}
		for _, c := range from.Columns {
			if _, ok := m.columns[ColumnID(other.Schema, other.Name, c.Name)]; !ok {
				out[c.Type] = append(out[c.Type], c)
			}
		}
		return out
	}
	dropped, added := byType(t, dt, d.desired), byType(dt, t, d.live)
	for _, c := range t.Columns {
		gone, is := dropped[c.Type], added[c.Type]
		if len(gone) != 1 || len(is) != 1 || gone[0].Name != c.Name {
			continue
		}
		*hints = append(*hints, fmt.Sprintf("column %s of table %s is dropped and column %s added with the same type (%s): if %s is %s renamed, "+
			"say so beside its definition (-- ptah:renamed-from %s) rather than allow the drop",
			ident(c.Name), qname(t.Schema, t.Name), ident(is[0].Name), c.Type, ident(is[0].Name), ident(c.Name), ident(c.Name)))
	}
}
