package catalog

import "reflect"

// canonicalize makes every empty slice and map in m nil, so that a model
// has one representation whether it was just read or decoded from the
// desired-state cache (which, like every binary encoding Go offers, keeps
// no difference between nil and empty). Models are compared and
// fingerprinted as JSON, where the two differ ("[]" against "null").
func canonicalize(m *Model) { canonicalValue(reflect.ValueOf(m).Elem()) }

func canonicalValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			canonicalValue(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				canonicalValue(f)
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			if !v.IsNil() {
				v.SetZero()
			}
			return
		}
		if k := v.Type().Elem().Kind(); k == reflect.Struct || k == reflect.Slice || k == reflect.Pointer || k == reflect.Map {
			for i := range v.Len() {
				canonicalValue(v.Index(i))
			}
		}
	case reflect.Map:
		if v.Len() == 0 && !v.IsNil() {
			v.SetZero()
		}
		// Map values are not addressable; the model's maps hold strings.
	}
}
