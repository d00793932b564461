//go:build cgo && linux

package gomlxinterop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// MinPJRTMinor is the oldest PJRT C API (0.MinPJRTMinor) accepted: the
// version go-xla v0.1.4's header declares, whose calls it makes.
const MinPJRTMinor = 83

var (
	// ErrNoPlugin marks a PJRT CUDA plugin that is not where it was looked
	// for.
	ErrNoPlugin = errors.New("gomlxinterop: no PJRT CUDA plugin")
	// ErrPluginVersion marks a plugin whose PJRT C API is too old.
	ErrPluginVersion = errors.New("gomlxinterop: PJRT plugin too old")
	// ErrDevice marks a GoMLX backend that does not run on distopt's GPU.
	ErrDevice = errors.New("gomlxinterop: GoMLX backend on another GPU")
)

// XLAConfig configures NewXLABackend.
type XLAConfig struct {
	// PluginPath is the PJRT CUDA plugin (xla_cuda_plugin.so). Empty: the
	// value of $DISTOPT_XLA_PLUGIN, else DefaultCUDAPlugin.
	PluginPath string
	// MemoryFraction caps XLA's allocator at this fraction of the GPU's
	// memory (the plugin's "memory_fraction"). Zero: 0.5.
	MemoryFraction float32
	// Preallocate makes XLA take MemoryFraction of the GPU at once (the
	// plugin's "preallocate"). Off by default, so that XLA's pool grows
	// only as the graphs need and never takes the memory distopt holds.
	Preallocate bool
	// Allocator is XLA's device allocator (the plugin's "allocator"):
	// "bfc" (a pool that grows in regions of its own sizes and keeps
	// them), "platform" (cuMemAlloc and free per buffer: what the graphs
	// hold at a time is what the driver sees, slower), "cuda_async"
	// (CUDA's stream-ordered pool) or "default". Empty: the plugin's
	// default (BFC).
	Allocator string
	// TF32 lets XLA multiply float32 matrices in TF32 on tensor cores
	// (GoMLX's "tf32" backend option). Off: exact float32 products.
	TF32 bool
	// Devices limits the client to these GPUs (CUDA ordinals; the plugin's
	// "visible_devices"), so that each process of a job with one rank per
	// GPU makes no context and no pool on the other ranks' GPUs. Nil: all.
	Devices []int
}

// PluginPath returns the plugin file cfg names: PluginPath, else
// $DISTOPT_XLA_PLUGIN, else DefaultCUDAPlugin. A missing file is
// ErrNoPlugin, with the paths searched and how to get a plugin.
func (cfg XLAConfig) pluginPath() (string, error) {
	searched := []string{}
	for _, p := range []string{cfg.PluginPath, os.Getenv(PluginEnv), DefaultCUDAPlugin} {
		if p == "" {
			continue
		}
		searched = append(searched, p)
		if _, err := os.Stat(p); err == nil {
			return filepath.Abs(p)
		}
		if cfg.PluginPath != "" || os.Getenv(PluginEnv) != "" {
			break // a path given is not replaced by the default
		}
	}
	return "", fmt.Errorf("%w: searched %q; install JAX's CUDA plugin (pip install jax-cuda13-pjrt; the file is jax_plugins/xla_cuda13/xla_cuda_plugin.so in site-packages) and give its path (-plugin or $%s)", ErrNoPlugin, searched, PluginEnv)
}

// NewXLABackend loads the PJRT CUDA plugin cfg names and returns a GoMLX
// XLA backend on it, whose allocator leaves distopt's memory alone (no
// preallocation unless asked, a cap of MemoryFraction, only the GPUs of
// Devices). Each process makes its own (one PJRT client). It never
// downloads a plugin. Errors: ErrNoPlugin, ErrPluginVersion, and those of
// the plugin.
func NewXLABackend(cfg XLAConfig) (*xla.Backend, error) {
	switch cfg.Allocator {
	case "", "default", "bfc", "platform", "cuda_async":
	default:
		return nil, fmt.Errorf("gomlxinterop: XLA allocator %q: want bfc, platform, cuda_async or default", cfg.Allocator)
	}
	path, err := cfg.pluginPath()
	if err != nil {
		return nil, err
	}
	plugin, err := pjrt.GetPlugin(path)
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: loading the PJRT plugin %s: %w", path, err)
	}
	if major, minor := plugin.Version(); major == 0 && minor < MinPJRTMinor {
		return nil, fmt.Errorf("%w: %s has PJRT C API %d.%d, need 0.%d or newer (a newer jax-cuda*-pjrt)", ErrPluginVersion, path, major, minor, MinPJRTMinor)
	}
	frac := cfg.MemoryFraction
	if frac == 0 {
		frac = 0.5
	}
	if frac < 0 || frac > 1 {
		return nil, fmt.Errorf("gomlxinterop: memory fraction %g is not in (0, 1]", frac)
	}
	xla.EnableAutoInstall(false)
	config := path
	if cfg.TF32 {
		config += ",tf32"
	}
	opts := pjrt.NamedValuesMap{"preallocate": cfg.Preallocate, "memory_fraction": frac}
	if cfg.Allocator != "" {
		opts["allocator"] = cfg.Allocator
	}
	if len(cfg.Devices) > 0 {
		ids := make([]int64, len(cfg.Devices))
		for i, d := range cfg.Devices {
			ids[i] = int64(d)
		}
		opts["visible_devices"] = ids
	}
	be, err := xla.NewWithOptions(config, opts)
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: XLA backend on %s: %w", path, err)
	}
	return be, nil
}

// xlaDevice returns the PJRT client of backend and the number of its
// device on GPU ordinal (PJRT's local hardware id, the CUDA ordinal);
// ErrDevice when the backend has none.
func xlaDevice(backend *xla.Backend, ordinal int) (*pjrt.Client, backends.DeviceNum, error) {
	probe, err := backend.BufferFromFlatData(0, []float32{0}, shapes.Make(dtypes.Float32))
	if err != nil {
		return nil, 0, fmt.Errorf("gomlxinterop: probing the XLA backend: %w", err)
	}
	pb, ok := probe.(*pjrt.Buffer)
	if !ok {
		return nil, 0, fmt.Errorf("%w: the backend's buffers are %T, not PJRT's", ErrDevice, probe)
	}
	client := pb.Client()
	if err := pb.Destroy(); err != nil {
		return nil, 0, fmt.Errorf("gomlxinterop: probing the XLA backend: %w", err)
	}
	var ids []int
	for i, d := range client.AddressableDevices() {
		if d.LocalHardwareID() == ordinal {
			return client, backends.DeviceNum(i), nil
		}
		ids = append(ids, d.LocalHardwareID())
	}
	return nil, 0, fmt.Errorf("%w: distopt runs on GPU %d, the GoMLX backend (%s) on GPUs %v", ErrDevice, ordinal, client.Platform(), ids)
}
