package ptxgen

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"

	"github.com/distopt/distopt/internal/cuda"
)

// cubinRE matches a cubin's file name: module, variant, architecture.
var cubinRE = regexp.MustCompile(`^(\w+)_(sm\d+)\.sm_(\d+)\.cubin$`)

// Load returns module in variant (such as "sm90") from fsys: the PTX
// ptxDir/MODULE_VARIANT.ptx and every cubin cubinDir/MODULE_VARIANT.sm_ARCH.cubin.
// A missing PTX is an error; a variant may have no cubin.
func Load(fsys fs.FS, ptxDir, cubinDir, module, variant string) (cuda.Code, error) {
	name := module + "_" + variant
	ptx, err := fs.ReadFile(fsys, path.Join(ptxDir, name+".ptx"))
	if err != nil {
		return cuda.Code{}, fmt.Errorf("ptxgen: no PTX for module %q, variant %s: %w", module, variant, err)
	}
	c := cuda.Code{Name: name, PTX: ptx, Cubins: map[int][]byte{}}
	files, err := fs.ReadDir(fsys, cubinDir)
	if err != nil {
		return cuda.Code{}, fmt.Errorf("ptxgen: cubins of %s: %w", name, err)
	}
	for _, f := range files {
		m := cubinRE.FindStringSubmatch(f.Name())
		if m == nil || m[1] != module || m[2] != variant {
			continue
		}
		arch, _ := strconv.Atoi(m[3])
		if c.Cubins[arch], err = fs.ReadFile(fsys, path.Join(cubinDir, f.Name())); err != nil {
			return cuda.Code{}, fmt.Errorf("ptxgen: %w", err)
		}
	}
	return c, nil
}
