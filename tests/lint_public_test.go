package tests

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/distopt/distopt"

// pendingLeaks are the exported declarations that still name a type of an
// internal package, as "package: declaration: type": none since issue 35.
// A leak missing from it fails the test, and so does an entry that no
// longer leaks.
var pendingLeaks []string

// TestPublicAPINamesNoInternalType parses every public package (outside
// internal/, cmd/, examples/, scripts/ and tests/) and checks that no
// exported function, method, type, field or variable names a type of an
// internal package in its declaration, so that a program outside this module
// can call all of it.
func TestPublicAPINamesNoInternalType(t *testing.T) {
	var found []string
	for _, tags := range []string{"", "gorgonia"} {
		for _, line := range goListLines(t, "-tags="+tags, "-f", "{{.ImportPath}}|{{.Dir}}|{{join .GoFiles \",\"}}", "./...") {
			parts := strings.Split(line, "|")
			if !publicPackage(parts[0]) || parts[2] == "" {
				continue
			}
			for _, f := range strings.Split(parts[2], ",") {
				found = append(found, leaks(t, parts[0], filepath.Join(parts[1], f))...)
			}
		}
	}
	ratchet(t, found, pendingLeaks, "names an internal type in its exported API")
}

// publicPackage reports whether p is a package whose API users hold.
func publicPackage(p string) bool {
	rel, ok := strings.CutPrefix(p, module+"/")
	if !ok {
		return false
	}
	for _, dir := range []string{"internal", "cmd", "examples", "scripts", "tests"} {
		if rel == dir || strings.HasPrefix(rel, dir+"/") || strings.Contains(rel, "/internal/") || strings.HasSuffix(rel, "/internal") {
			return false
		}
	}
	return true
}

// leaks returns "package: declaration: type" for each internal type named by
// the exported declarations of one file.
func leaks(t *testing.T, pkg, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	internal := map[string]string{} // local name -> import path, for internal imports
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if !strings.HasPrefix(p, module+"/internal/") && !strings.Contains(p, "/internal/") {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		internal[name] = p
	}
	var out []string
	report := func(decl string, n ast.Node) {
		if n == nil {
			return
		}
		ast.Inspect(n, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && internal[x.Name] != "" {
					out = append(out, fmt.Sprintf("%s: %s: %s.%s", strings.TrimPrefix(pkg, module+"/"), decl, strings.TrimPrefix(internal[x.Name], module+"/"), sel.Sel.Name))
				}
			}
			return true
		})
	}
	for _, d := range f.Decls {
		exportedDecl(d, report)
	}
	return out
}

// exportedDecl calls report with the type expressions of d's exported API.
func exportedDecl(d ast.Decl, report func(string, ast.Node)) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return
		}
		name := d.Name.Name
		if d.Recv != nil {
			recv := receiverName(d.Recv.List[0].Type)
			if !ast.IsExported(recv) {
				return
			}
			name = recv + "." + name
		}
		report(name, d.Type)
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					report(s.Name.Name, exportedParts(s))
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						report(n.Name, s.Type)
					}
				}
			}
		}
	}
}

// exportedParts returns the part of a type declaration that users see: the
// whole type, less the unexported fields and methods of structs and
// interfaces.
func exportedParts(s *ast.TypeSpec) ast.Node {
	keep := func(fl *ast.FieldList) *ast.FieldList {
		var out ast.FieldList
		for _, f := range fl.List {
			exported := len(f.Names) == 0 // embedded
			for _, n := range f.Names {
				exported = exported || n.IsExported()
			}
			if exported {
				out.List = append(out.List, f)
			}
		}
		return &out
	}
	switch typ := s.Type.(type) {
	case *ast.StructType:
		return &ast.TypeSpec{TypeParams: s.TypeParams, Type: &ast.StructType{Fields: keep(typ.Fields)}}
	case *ast.InterfaceType:
		return &ast.TypeSpec{TypeParams: s.TypeParams, Type: &ast.InterfaceType{Methods: keep(typ.Methods)}}
	}
	return s
}

func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// pendingExampleImports are the imports of internal packages that packages
// under examples/ still make, as "package: import": none since issue 35.
// An import missing from it fails the test, and so does an entry that is
// no longer made.
var pendingExampleImports []string

// TestExamplesImportNoInternal checks that no package under examples/, tests
// included, imports a package of the module's internal/, so that each example
// builds when copied into a module of its own.
func TestExamplesImportNoInternal(t *testing.T) {
	var found []string
	for _, line := range goListLines(t, "-f", "{{.ImportPath}}|{{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./examples/...") {
		pkg, imports, _ := strings.Cut(line, "|")
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, module+"/internal/") && !slices.Contains(found, pkg+": "+imp) {
				found = append(found, strings.TrimPrefix(pkg, module+"/")+": "+strings.TrimPrefix(imp, module+"/"))
			}
		}
	}
	ratchet(t, found, pendingExampleImports, "imports an internal package")
}

// ratchet fails for each entry of found missing from pending, and for each
// entry of pending no longer found.
func ratchet(t *testing.T, found, pending []string, what string) {
	t.Helper()
	slices.Sort(found)
	found = slices.Compact(found)
	for _, f := range found {
		if !slices.Contains(pending, f) {
			t.Errorf("%s: %s", what, f)
		}
	}
	for _, p := range pending {
		if !slices.Contains(found, p) {
			t.Errorf("%q is fixed: remove it from the pending list", p)
		}
	}
}

// goListLines runs go list in the module's root and returns its lines.
func goListLines(t *testing.T, args ...string) []string {
	t.Helper()
	return strings.Split(strings.TrimSpace(goListOutput(t, args...)), "\n")
}
