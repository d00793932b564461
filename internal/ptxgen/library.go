package ptxgen

import (
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/distopt/distopt/internal/cuda"
)

// The directories of a package's embedded files that a Library reads.
const (
	ptxDir   = "ptx"
	cubinDir = "cubin"
)

// Library is every module of a package's generated code (fsys holding
// ptx/ and cubin/ as gen.sh writes them) loaded on one device in one
// variant, with its kernels by name.
type Library struct {
	d       *cuda.Device
	v       Variant
	modules []*cuda.Module
	images  map[string]cuda.Image // by module
	fns     map[string]*cuda.Function
}

// LoadLibrary loads every module of fsys on d in variant v, from the
// cubins for d's architecture where they are shipped (sm_80 for 8.x, sm_90
// for 9.0), else from the PTX through the driver's JIT (newer GPUs; the
// sm80 variant on a 9.0 GPU; DISTOPT_CUDA_PTX=1). Images says which. It
// fails with ErrUnsupported when d cannot run v, and with the JIT's log
// when the driver rejects the PTX.
func LoadLibrary(d *cuda.Device, fsys fs.FS, v Variant) (*Library, error) {
	return LoadModules(d, fsys, v, Modules(fsys))
}

// LoadModules is LoadLibrary for the named modules of fsys alone: a
// module that fsys lacks is an error.
func LoadModules(d *cuda.Device, fsys fs.FS, v Variant, names []string) (*Library, error) {
	info := d.Info()
	if !v.Supports(info) {
		return nil, fmt.Errorf("%w: variant %v on sm_%d%d", ErrUnsupported, v, info.Major, info.Minor)
	}
	start := time.Now()
	l := &Library{d: d, v: v, fns: map[string]*cuda.Function{}, images: map[string]cuda.Image{}}
	for _, name := range names {
		if err := l.loadModule(fsys, name); err != nil {
			l.Unload()
			return nil, err
		}
	}
	slog.Debug("kernels: loaded", "variant", v, "device", fmt.Sprintf("sm_%d%d", info.Major, info.Minor),
		"code", l.ImageSummary(), "modules", len(l.modules), "took", time.Since(start))
	return l, nil
}

// loadModule loads module name in the library's variant and looks up its
// kernels.
func (l *Library) loadModule(fsys fs.FS, name string) error {
	c, err := Load(fsys, ptxDir, cubinDir, name, l.v.String())
	if err != nil {
		return fmt.Errorf("kernels: %w", err)
	}
	m, err := l.d.LoadCode(c)
	if err != nil {
		return fmt.Errorf("kernels: loading %s_%v: %w", name, l.v, err)
	}
	l.modules = append(l.modules, m)
	l.images[name] = m.Image()
	for _, e := range Entries(c.PTX) {
		f, err := m.Function(e)
		if err != nil {
			return fmt.Errorf("kernels: %s_%v: %w", name, l.v, err)
		}
		l.fns[e] = f
	}
	return nil
}

// Function returns the kernel called name, and false when no module
// defines it.
func (l *Library) Function(name string) (*cuda.Function, bool) {
	f, ok := l.fns[name]
	return f, ok
}

// Functions returns every kernel of the library by name.
func (l *Library) Functions() map[string]*cuda.Function { return maps.Clone(l.fns) }

// Images returns what each module (by name) was loaded from: a cubin, or
// PTX compiled by the driver's JIT.
func (l *Library) Images() map[string]cuda.Image { return maps.Clone(l.images) }

// ImageSummary names each distinct image of the modules with the number
// of modules loaded from it: "PTX (driver JIT) x1, sm_90 cubin x5".
func (l *Library) ImageSummary() string {
	count := map[cuda.Image]int{}
	for _, im := range l.images {
		count[im]++
	}
	var parts []string
	for im, n := range count {
		parts = append(parts, fmt.Sprintf("%v x%d", im, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// Variant returns the variant loaded.
func (l *Library) Variant() Variant { return l.v }

// Unload unloads the modules, once the work queued with their kernels is
// done; the first error is returned. The Library must not be used
// afterwards.
func (l *Library) Unload() error {
	var first error
	for _, m := range l.modules {
		if err := m.Unload(); err != nil && first == nil {
			first = err
		}
	}
	l.modules, l.fns = nil, nil
	return first
}

// Modules returns the names of the modules of fsys (the files of ptx/,
// less their variant), sorted.
func Modules(fsys fs.FS) []string {
	seen := map[string]bool{}
	entries, _ := fs.ReadDir(fsys, ptxDir)
	for _, e := range entries {
		name, _, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".ptx"), "_sm")
		if ok {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PTX returns the PTX text of module in variant v from fsys.
func PTX(fsys fs.FS, module string, v Variant) ([]byte, error) {
	b, err := fs.ReadFile(fsys, path.Join(ptxDir, module+"_"+v.String()+".ptx"))
	if err != nil {
		return nil, fmt.Errorf("kernels: no PTX for module %q, variant %v: %w", module, v, err)
	}
	return b, nil
}
