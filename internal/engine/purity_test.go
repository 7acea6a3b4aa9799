package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The engine decides; it does no I/O, reads no clock and draws no random
// number (DESIGN.md section 3). These tests hold the rule to the code: the
// engine and everything it imports, transitively, may use only the packages
// below, and the engine's own code calls nothing that reads the time.

// pureImports are the packages the engine's dependency graph may contain,
// besides ptah's own pure packages (pureOwn). Each does no I/O of its own.
var pureImports = map[string]bool{
	"bytes": true, "cmp": true, "crypto/sha256": true, "encoding/hex": true, "encoding/json": true,
	"errors": true, "fmt": true, "hash": true, "maps": true, "regexp": true, "slices": true,
	"sort": true, "strconv": true, "strings": true, "time": true, "unicode": true, "unicode/utf8": true,
	// The API types are Kubernetes types: these define object metadata,
	// times and type registration, and do no I/O.
	"k8s.io/apimachinery/pkg/apis/meta/v1": true, "k8s.io/apimachinery/pkg/runtime": true,
	"k8s.io/apimachinery/pkg/runtime/schema": true,
}

var pureOwn = map[string]bool{
	"github.com/ptah-run/ptah/internal/engine":      true,
	"github.com/ptah-run/ptah/internal/fingerprint": true,
	"github.com/ptah-run/ptah/pkg/api/v1alpha1":     true,
}

func TestEngineImportsNothingThatDoesIO(t *testing.T) {
	for _, pkg := range append([]string{"github.com/ptah-run/ptah/internal/engine"}, keys(pureOwn)...) {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, imp := range strings.Fields(string(out)) {
			if !pureImports[imp] && !pureOwn[imp] {
				t.Errorf("%s imports %s, which is not on the engine's list of pure packages: "+
					"decisions take observations as values; do the I/O in a shell (runner, controller)", pkg, imp)
			}
		}
	}
}

// clockAndChance are the calls that would make a decision depend on when or
// how often it is taken.
var clockAndChance = map[string]bool{
	"time.Now": true, "time.Since": true, "time.Until": true, "time.Sleep": true,
	"time.After": true, "time.Tick": true, "time.NewTimer": true, "time.NewTicker": true, "time.AfterFunc": true,
}

func TestEngineReadsNoClock(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && clockAndChance[x.Name+"."+sel.Sel.Name] {
				t.Errorf("%s: %s.%s: the engine takes the time as an input (SchemaPassInput.Now)",
					fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no engine source files found")
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
