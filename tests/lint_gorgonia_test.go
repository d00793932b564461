package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gorgoniaModule is the module that only interop/gorgonia, behind the
// build tag gorgonia, may import: its package init exits the process on a
// host without a GPU.
const gorgoniaModule = "gorgonia.org/cu"

// goList runs go list in the module root and returns its output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	return strings.Fields(goListOutput(t, args...))
}

// goListOutput runs go list with args in the module's root.
func goListOutput(t *testing.T, args ...string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	cmd := exec.Command(gobin, append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return string(out)
}

func importsGorgonia(pkgs []string) []string {
	var bad []string
	for _, p := range pkgs {
		if p == gorgoniaModule || strings.HasPrefix(p, gorgoniaModule+"/") {
			bad = append(bad, p)
		}
	}
	return bad
}

// TestDefaultBuildWithoutGorgonia checks that no package of the default
// build, tests included, depends on gorgonia.org/cu, and that the check
// sees it where the tag brings it in.
func TestDefaultBuildWithoutGorgonia(t *testing.T) {
	if bad := importsGorgonia(goList(t, "-deps", "-test", "./...")); len(bad) > 0 {
		t.Errorf("the default build depends on %v: import it only behind the gorgonia build tag", bad)
	}
	if len(importsGorgonia(goList(t, "-deps", "-tags", "gorgonia", "./interop/gorgonia"))) == 0 {
		t.Errorf("with -tags gorgonia, interop/gorgonia does not depend on %s: this check would see nothing", gorgoniaModule)
	}
}

// TestGorgoniaTagged checks that, without the tag, interop/gorgonia is its
// doc.go alone, and that every other Go file there starts with the
// constraint //go:build gorgonia.
func TestGorgoniaTagged(t *testing.T) {
	const dir = "../interop/gorgonia"
	files := goList(t, "-f", "{{join .GoFiles \" \"}} {{join .CgoFiles \" \"}} {{join .TestGoFiles \" \"}} {{join .XTestGoFiles \" \"}}", "./interop/gorgonia")
	if !slices.Equal(files, []string{"doc.go"}) {
		t.Errorf("default build of interop/gorgonia compiles %v, want [doc.go]", files)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	tagged := 0
	for _, name := range names {
		if filepath.Base(name) == "doc.go" {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if first, _, _ := strings.Cut(string(src), "\n"); first != "//go:build gorgonia" {
			t.Errorf("%s starts with %q, want //go:build gorgonia", name, first)
		}
		tagged++
	}
	if tagged == 0 {
		t.Errorf("no tagged files in %s", dir)
	}
}
