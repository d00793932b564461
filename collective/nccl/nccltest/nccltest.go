// Package nccltest provides what the tests of the NCCL communicator share:
// collectivetest options for device buffers, and groups of communicators
// of one process on several GPUs.
package nccltest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/cuda"
)

// Buffers allocates, fills and reads buffer.DeviceBuffer values on a
// set of devices, with one copy stream per device.
type Buffers struct {
	mu      sync.Mutex
	devs    map[int]*cuda.Device
	streams map[int]*cuda.Stream
}

// NewBuffers serves buffers on devs. Close releases its streams (the
// buffers are freed by Free).
func NewBuffers(devs ...*cuda.Device) *Buffers {
	b := &Buffers{devs: make(map[int]*cuda.Device), streams: make(map[int]*cuda.Stream)}
	for _, d := range devs {
		b.devs[d.Ordinal()] = d
	}
	return b
}

// Alloc returns n bytes on the device of ordinal dev.
func (b *Buffers) Alloc(dev, n int) (buffer.DeviceBuffer, error) {
	d, err := b.device(dev)
	if err != nil {
		return buffer.DeviceBuffer{}, err
	}
	p, err := d.Alloc(n)
	return buffer.DeviceBuffer{Ptr: uintptr(p), Size: n, Device: dev}, err
}

// Free releases a buffer of Alloc.
func (b *Buffers) Free(buf buffer.DeviceBuffer) error {
	d, err := b.device(buf.Device)
	if err != nil {
		return err
	}
	return d.Free(cuda.DevicePtr(buf.Ptr))
}

// Upload copies data into buf and returns once it is there.
func (b *Buffers) Upload(buf buffer.DeviceBuffer, data []byte) error {
	s, err := b.stream(buf.Device)
	if err != nil {
		return err
	}
	return s.Upload(cuda.DevicePtr(buf.Ptr), data[:buf.Size])
}

// Download copies buf into dst.
func (b *Buffers) Download(buf buffer.DeviceBuffer, dst []byte) error {
	s, err := b.stream(buf.Device)
	if err != nil {
		return err
	}
	return s.Download(dst[:buf.Size], cuda.DevicePtr(buf.Ptr))
}

// Options returns o with the buffer hooks set to b's.
func (b *Buffers) Options(o collectivetest.Options) collectivetest.Options {
	o.Alloc = func(c collective.Communicator, n int) (buffer.Buffer, error) {
		return b.Alloc(c.(*nccl.Comm).Device().Ordinal(), n)
	}
	o.Free = func(buf buffer.Buffer) error { return b.Free(buf.(buffer.DeviceBuffer)) }
	o.Upload = func(buf buffer.Buffer, data []byte) error {
		return b.Upload(buf.(buffer.DeviceBuffer), data)
	}
	o.Download = func(buf buffer.Buffer, dst []byte) error {
		return b.Download(buf.(buffer.DeviceBuffer), dst)
	}
	return o
}

// Close destroys the copy streams.
func (b *Buffers) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for k, s := range b.streams {
		errs = append(errs, s.Destroy())
		delete(b.streams, k)
	}
	return errors.Join(errs...)
}

func (b *Buffers) device(ordinal int) (*cuda.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.devs[ordinal]
	if !ok {
		return nil, fmt.Errorf("nccltest: no device %d", ordinal)
	}
	return d, nil
}

func (b *Buffers) stream(ordinal int) (*cuda.Stream, error) {
	d, err := b.device(ordinal)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.streams[ordinal]
	if !ok {
		if s, err = d.NewStream(); err != nil {
			return nil, err
		}
		b.streams[ordinal] = s
	}
	return s, nil
}

// FreePort returns a TCP port of the loopback interface that was free a
// moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Stores connects n ranks of a run to a store served on a free local port
// (rank 0 serves it). Close them with CloseStores.
func Stores(ctx context.Context, n int) ([]*rendezvous.Store, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	stores := make([]*rendezvous.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			stores[r], errs[r] = rendezvous.Connect(ctx, rendezvous.Config{
				Rank: r, WorldSize: n, LocalRank: r, LocalWorldSize: n,
				MasterAddr: "127.0.0.1", MasterPort: port, CloseTimeout: 2 * time.Second,
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		CloseStores(stores)
		return nil, err
	}
	return stores, nil
}

// CloseStores closes the stores that are not nil, all at once (rank 0's
// waits for the others).
func CloseStores(stores []*rendezvous.Store) error {
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		if s != nil {
			wg.Go(func() { errs[i] = s.Close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Group creates a group of len(devs) communicators in this process, rank r
// on devs[r], with cfg (whose Store and Device are set per rank) over a
// new local store. close closes the communicators and then the stores.
func Group(ctx context.Context, devs []*cuda.Device, cfg nccl.Config) (comms []*nccl.Comm, close func() error, err error) {
	n := len(devs)
	stores, err := Stores(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	comms = make([]*nccl.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c := cfg
			c.Store, c.Device = stores[r], devs[r]
			comms[r], errs[r] = nccl.New(ctx, c)
		})
	}
	wg.Wait()
	close = func() error {
		cerrs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range comms {
			if c != nil {
				wg.Go(func() { cerrs[r] = c.Close() })
			}
		}
		wg.Wait()
		return errors.Join(errors.Join(cerrs...), CloseStores(stores))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, errors.Join(err, close())
	}
	return comms, close, nil
}
