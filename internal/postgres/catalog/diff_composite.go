package catalog

import (
	"slices"
	"strings"
)

// A composite type is altered in place (ADD, DROP, ALTER ATTRIBUTE) when it
// can be. It is replaced instead (renamed away, created anew, its columns
// converted, the old one dropped: see emitReplaceStart) when ALTER TYPE
// cannot reach the desired type:
//
//   - the desired attribute order is not the old order with the dropped
//     attributes left out and the new ones appended (ALTER TYPE cannot
//     reorder, and ADD ATTRIBUTE appends);
//   - an attribute changes type or collation while a table column or
//     another composite type stores the type: PostgreSQL refuses
//     ALTER ATTRIBUTE ... TYPE then, whatever the data.
//
// (It is also replaced when a type one of its attributes has is: see
// propagate.)
func (d *differ) compositeNeedsReplace(l, n Composite) bool {
	old := map[string]Attribute{}
	for _, a := range l.Attributes {
		old[a.Name] = a
	}
	want := map[string]bool{}
	for _, a := range n.Attributes {
		want[a.Name] = true
	}
	var reached []string
	for _, a := range l.Attributes {
		if want[a.Name] {
			reached = append(reached, a.Name)
		}
	}
	var changed bool
	for _, a := range n.Attributes {
		o, ok := old[a.Name]
		if !ok {
			reached = append(reached, a.Name)
		} else if o.Type != a.Type || o.Collation != a.Collation {
			changed = true
		}
	}
	if !slices.Equal(reached, attributeNames(n)) {
		return true
	}
	return changed && d.storesValues(l.ID())
}

func attributeNames(c Composite) []string {
	names := make([]string, len(c.Attributes))
	for i, a := range c.Attributes {
		names[i] = a.Name
	}
	return names
}

// storesValues says whether values of type typ are stored: in a table
// column, or in an attribute of another composite type, or (for all ptah
// can tell) by an object outside the managed schemas that depends on it
// (checkOutside then refuses the replacement by name).
func (d *differ) storesValues(typ ID) bool {
	for _, dep := range d.live.deps {
		if dep.RefObject == typ && (dep.Object.Kind == KindColumn || dep.Object.Kind == KindComposite) {
			return true
		}
	}
	for _, o := range d.live.m.Outside {
		if o.RefObject == typ {
			return true
		}
	}
	return false
}

// replacedNamed is the replaced type that format_type prints as typ, or
// whose array typ is.
func (d *differ) replacedNamed(typ string) (ID, bool) {
	base := strings.TrimSuffix(typ, "[]")
	for id := range d.replaced {
		if base == qname(id.Schema, id.Name) || base == id.Schema+"."+id.Name {
			return id, true
		}
	}
	return ID{}, false
}

// convertValue is the expression that turns expr, a value of the old type
// from, into a value of the new type to (format_type names). A value of a
// replaced type has no cast to its replacement: an enum or domain goes
// through text; a composite is rebuilt attribute by attribute (see
// compositeValue), except in an array, which goes through text too. Any
// other change is a cast, which checkCasts verifies; c says whose it is.
func (d *differ) convertValue(expr, from, to string, c cast) string {
	if typ, ok := d.replacedNamed(from); ok {
		array := strings.HasSuffix(to, "[]")
		switch {
		case typ.Kind == KindComposite && from == to && !array:
			return d.compositeValue(expr, typ, to, c)
		case typ.Kind == KindComposite && from == to && !d.positionsKept(typ):
			d.refused = append(d.refused, c.what()+" is an array of "+describe(typ)+", whose attributes (or those of a type in it) are added, dropped or reordered")
		}
		if array {
			return expr + "::text[]::" + to
		}
		return expr + "::text::" + to
	}
	if from == to {
		return expr
	}
	c.from, c.to = from, to
	d.casts = append(d.casts, c)
	return expr + "::" + to
}

// compositeValue rebuilds expr, a value of the replaced composite type typ,
// as a value of the new type (named to), attribute by name: an attribute
// the new type adds is NULL, one it drops is left behind, each other one is
// converted. A NULL value stays NULL (one whose attributes are all NULL is
// not NULL, and stays as it is).
func (d *differ) compositeValue(expr string, typ ID, to string, c cast) string {
	old := map[string]Attribute{}
	for _, a := range d.live.byID[typ].(Composite).Attributes {
		old[a.Name] = a
	}
	attrs := d.desired.byID[typ].(Composite).Attributes
	fields := make([]string, 0, len(attrs))
	for _, a := range attrs {
		o, ok := old[a.Name]
		if !ok {
			fields = append(fields, "NULL::"+a.Type)
			continue
		}
		ac := c
		ac.attribute = strings.TrimPrefix(c.attribute+"."+ident(a.Name), ".")
		fields = append(fields, d.convertValue("("+expr+")."+ident(a.Name), o.Type, a.Type, ac))
	}
	return "CASE WHEN " + expr + " IS DISTINCT FROM NULL THEN ROW(" + strings.Join(fields, ", ") + ")::" + to + " END"
}

// positionsKept says whether text, which lists a composite value's
// attributes by position, still fits the replaced composite typ: its
// attributes and those of the replaced composites in it keep their names
// in order.
func (d *differ) positionsKept(typ ID) bool {
	l, n := d.live.byID[typ].(Composite), d.desired.byID[typ].(Composite)
	if !slices.Equal(attributeNames(l), attributeNames(n)) {
		return false
	}
	for _, a := range l.Attributes {
		if inner, ok := d.replacedNamed(a.Type); ok && inner.Kind == KindComposite && inner != typ && !d.positionsKept(inner) {
			return false
		}
	}
	return true
}

// compositeLoses says whether converting values of the replaced composite
// typ loses data (an attribute is dropped, here or in a composite in it) or
// may fail (an attribute's new type may not hold every old value).
func (d *differ) compositeLoses(typ ID) (deletes, mayFail bool) {
	want := map[string]Attribute{}
	for _, a := range d.desired.byID[typ].(Composite).Attributes {
		want[a.Name] = a
	}
	for _, a := range d.live.byID[typ].(Composite).Attributes {
		n, ok := want[a.Name]
		if !ok {
			deletes = true
			continue
		}
		if inner, ok := d.replacedNamed(a.Type); ok && inner != typ {
			if inner.Kind == KindComposite {
				del, fail := d.compositeLoses(inner)
				deletes, mayFail = deletes || del, mayFail || fail
			} else {
				mayFail = mayFail || d.replacementMayFail(inner)
			}
		} else if n.Type != a.Type && !widening(a.Type, n.Type) {
			mayFail = true
		}
	}
	return deletes, mayFail
}
