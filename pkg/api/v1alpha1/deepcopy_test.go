package v1alpha1

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// deepCopiers are the objects whose DeepCopy controller-gen generates
// (zz_generated.deepcopy.go, make generate). The test fills every field,
// reached through every pointer and slice, so that a field the generator
// copies shallowly (a type it does not know how to copy) makes it fail.
// Kubernetes' own metadata and time types are taken as they are.
var deepCopiers = map[string]func() (orig, copy func() any){
	"PtahSchema":                     copier(func(s *PtahSchema) *PtahSchema { return s.DeepCopy() }),
	"PtahSchemaStatus":               copier(func(s *PtahSchemaStatus) *PtahSchemaStatus { return s.DeepCopy() }),
	"PtahSchemaPlan":                 copier(func(s *PtahSchemaPlan) *PtahSchemaPlan { return s.DeepCopy() }),
	"PtahSchemaApproval":             copier(func(s *PtahSchemaApproval) *PtahSchemaApproval { return s.DeepCopy() }),
	"PtahMigration":                  copier(func(s *PtahMigration) *PtahMigration { return s.DeepCopy() }),
	"PtahMigrationStatus":            copier(func(s *PtahMigrationStatus) *PtahMigrationStatus { return s.DeepCopy() }),
	"PtahMigrationPlan":              copier(func(s *PtahMigrationPlan) *PtahMigrationPlan { return s.DeepCopy() }),
	"PtahMigrationApproval":          copier(func(s *PtahMigrationApproval) *PtahMigrationApproval { return s.DeepCopy() }),
	"PtahMigrationRunAcknowledgment": copier(func(s *PtahMigrationRunAcknowledgment) *PtahMigrationRunAcknowledgment { return s.DeepCopy() }),
}

// copier fills a new T, deep-copies it, and hands both back.
func copier[T any](deepCopy func(*T) *T) func() (func() any, func() any) {
	return func() (func() any, func() any) {
		orig := new(T)
		fill(reflect.ValueOf(orig).Elem())
		c := deepCopy(orig)
		return func() any { return orig }, func() any { return c }
	}
}

func TestDeepCopySharesNoMemory(t *testing.T) {
	for name, mk := range deepCopiers {
		t.Run(name, func(t *testing.T) {
			orig, cp := mk()
			if !reflect.DeepEqual(orig(), cp()) {
				t.Fatalf("the copy differs from the original:\n%+v\n%+v", orig(), cp())
			}
			for _, shared := range sharedMemory(reflect.ValueOf(orig()).Elem(), reflect.ValueOf(cp()).Elem(), name) {
				t.Errorf("%s is shared by the original and the copy", shared)
			}
		})
	}
}

func TestDeepCopyOfNil(t *testing.T) {
	if (*PtahMigration)(nil).DeepCopy() != nil || (*PtahMigrationStatus)(nil).DeepCopy() != nil ||
		(*PtahMigrationPlan)(nil).DeepCopy() != nil || (*PtahMigrationApproval)(nil).DeepCopy() != nil ||
		(*PtahMigrationRunAcknowledgment)(nil).DeepCopy() != nil || (*PtahSchemaStatus)(nil).DeepCopy() != nil {
		t.Fatal("DeepCopy of nil is not nil")
	}
}

var timeType = reflect.TypeFor[time.Time]()

// fromKubernetes reports whether t is one of apimachinery's types, which
// copy themselves.
func fromKubernetes(t reflect.Type) bool {
	return strings.HasPrefix(t.PkgPath(), "k8s.io/apimachinery/")
}

// fill sets every exported field of v to a non-zero value, allocating every
// pointer and giving every slice two elements.
func fill(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)))
		return
	case v.Type() == reflect.TypeFor[Time]():
		v.Set(reflect.ValueOf(NewTime(time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC))))
		return
	case fromKubernetes(v.Type()):
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := 0; i < 2; i++ {
			fill(v.Index(i))
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	default:
		panic(fmt.Sprintf("fill: add a case for %s", v.Type()))
	}
}

// sharedMemory walks a and b together and names every pointer, slice or
// map they share.
func sharedMemory(a, b reflect.Value, path string) []string {
	if a.Type() == timeType || a.Type() == reflect.TypeFor[Time]() || fromKubernetes(a.Type()) {
		return nil // a value (a time's *Location is shared by design), or Kubernetes' own
	}
	var shared []string
	switch a.Kind() {
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if a.Type().Field(i).IsExported() {
				shared = append(shared, sharedMemory(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)...)
			}
		}
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			return []string{path}
		}
		return sharedMemory(a.Elem(), b.Elem(), path)
	case reflect.Slice:
		if a.Len() > 0 && b.Len() > 0 && a.Pointer() == b.Pointer() {
			return []string{path}
		}
		for i := 0; i < min(a.Len(), b.Len()); i++ {
			shared = append(shared, sharedMemory(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
	case reflect.Map:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			return []string{path}
		}
	}
	return shared
}
