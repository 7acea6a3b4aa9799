package engine

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/guarantees.md maps each guarantee to the function that enforces it
// and the test that proves it. Every name it gives in backquotes must
// exist: a function or method as `pkg.Name` or `pkg.Type.Method` (pkg
// being the last element of its package's directory), a test as `TestX`.
// Renaming or removing one without fixing the page fails here.
func TestGuaranteesMapNamesWhatExists(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{} // package directory name -> its non-test code
	tests := ""                    // every test file
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			tests += string(data)
		} else {
			sources[filepath.Base(filepath.Dir(path))] += string(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile("`([A-Za-z0-9_.]+)`").FindAllStringSubmatch(string(doc), -1)
	checked := 0
	for _, m := range names {
		name := m[1]
		parts := strings.Split(name, ".")
		switch {
		case parts[0] == "status" || parts[0] == "spec":
			continue // a field of a resource, e.g. `status.pendingObservation`
		case len(parts) == 1 && strings.HasPrefix(name, "Test"):
			if !regexp.MustCompile(`(?m)^func ` + name + `\(t \*testing\.T\)`).MatchString(tests) {
				t.Errorf("docs/guarantees.md names test %s, which does not exist", name)
			}
		case len(parts) == 2 || len(parts) == 3:
			src, ok := sources[parts[0]]
			if !ok {
				t.Errorf("docs/guarantees.md names %s: no package %s", name, parts[0])
				continue
			}
			var def string
			if len(parts) == 2 {
				def = `(?m)^(func ` + parts[1] + `[\[(]|type ` + parts[1] + ` )`
			} else {
				def = `(?m)^func \(\w+ \*?` + parts[1] + `\) ` + parts[2] + `\(`
			}
			if !regexp.MustCompile(def).MatchString(src) {
				t.Errorf("docs/guarantees.md names %s, which does not exist", name)
			}
		default:
			continue
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("only %d names checked in docs/guarantees.md; the page names the function and the test of each guarantee", checked)
	}
}
