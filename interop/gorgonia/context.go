//go:build gorgonia

package cuinterop

import (
	"fmt"
	"unsafe"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
	"github.com/distopt/distopt/optimizer/gpu"
	"gorgonia.org/cu"
)

// Do runs fn on the device thread of b, where the primary context of b's
// GPU is current, and returns fn's error: every package-level call of
// gorgonia.org/cu inside fn acts in distopt's context. fn blocks the
// backend's own calls while it runs. A panic in fn is raised again in the
// caller; after b is closed Do returns its device's closed error.
func Do(b *gpu.Backend, fn func() error) error { return cudalink.Device(b.Device()).Do(fn) }

// PrimaryContext returns the primary context of b's GPU as a cu.CUContext,
// for a program that makes it current on its own locked threads
// (cu.SetCurrentContext). It stays valid while b is open. Do not Destroy it
// or wrap it in a *cu.Ctx (see the package doc).
func PrimaryContext(b *gpu.Backend) cu.CUContext {
	return toContext(cudalink.Device(b.Device()).Context())
}

// Context is the primary context of one GPU, current on a dedicated OS
// thread of its own: gorgonia work run through Context.Do shares memory with
// distopt and runs concurrently with distopt's device thread. Its methods
// are safe for concurrent use.
type Context struct {
	d   *cuda.Device
	dev cu.Device
}

// OpenContext retains the primary context of dev and starts the thread
// that holds it current. Without a driver or a device of that ordinal the
// error matches cuda's ErrNoDriver or ErrNoDevice (gpu.New reports the same
// conditions as gpu.ErrUnavailable). Close releases the context.
func OpenContext(dev cu.Device) (*Context, error) {
	d, err := cuda.Open(int(dev))
	if err != nil {
		return nil, fmt.Errorf("cuinterop: primary context of device %d: %w", int(dev), err)
	}
	return &Context{d: d, dev: dev}, nil
}

// Do runs fn on the context's thread with the primary context current and
// returns fn's error. Calls from inside fn to Do run directly. A panic in
// fn is raised again in the caller. After Close it returns an error.
func (c *Context) Do(fn func() error) error { return c.d.Do(fn) }

// CUContext returns the primary context (see PrimaryContext for the rules).
func (c *Context) CUContext() cu.CUContext { return toContext(c.d.Context()) }

// Device returns the context's GPU.
func (c *Context) Device() cu.Device { return c.dev }

// Close stops the thread and releases the primary context; memory
// allocated in it stays valid while any other user (a gpu.Backend, the
// CUDA runtime) still retains the context. It must not be called from
// inside Do. A second Close returns an error.
func (c *Context) Close() error { return c.d.Close() }

// toContext converts a raw CUcontext into gorgonia's handle, a struct of
// that one pointer.
func toContext(h uintptr) cu.CUContext { return *(*cu.CUContext)(unsafe.Pointer(&h)) }

// The conversions between raw handles and gorgonia's handle types reinterpret
// memory: each of those types must be exactly one pointer wide. These
// constants fail to compile otherwise.
const (
	_ = uintptr(unsafe.Sizeof(cu.CUContext{}) - unsafe.Sizeof(uintptr(0)))
	_ = uintptr(unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.CUContext{}))
	_ = uintptr(unsafe.Sizeof(cu.Stream{}) - unsafe.Sizeof(uintptr(0)))
	_ = uintptr(unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.Stream{}))
	_ = uintptr(unsafe.Sizeof(cu.Event{}) - unsafe.Sizeof(uintptr(0)))
	_ = uintptr(unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.Event{}))
)
