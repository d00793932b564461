package tests

import (
	"os"
	"strings"
	"testing"
)

// gomlxModule is required only by the module of interop/gomlx, so that
// the core module never pulls GoMLX's dependencies.
const gomlxModule = "github.com/gomlx/"

// TestCoreWithoutGoMLX checks that no package of the core module, tests
// included, depends on GoMLX, that the core go.mod does not require it,
// and that interop/gomlx is a module of its own (which the core's ./...
// therefore skips) that does.
func TestCoreWithoutGoMLX(t *testing.T) {
	for _, p := range goList(t, "-deps", "-test", "./...") {
		if strings.HasPrefix(p, gomlxModule) {
			t.Errorf("the core module depends on %s: GoMLX belongs in interop/gomlx's own module", p)
		}
	}
	for _, f := range []struct {
		path string
		want bool
	}{{"../go.mod", false}, {"../interop/gomlx/go.mod", true}} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), gomlxModule+"gomlx "); got != f.want {
			t.Errorf("%s requires GoMLX: %t, want %t", f.path, got, f.want)
		}
	}
}
