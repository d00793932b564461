package fp8grad_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/nccl/nccltest"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/cudalink"
)

// TestGPUComm runs FP8 reduce-scatters through NewDevice over NCCL (one
// rank per GPU, 1 or 2 GPUs) and through New over in-process ranks, the
// same gradients on both (with a NaN, odd shard sizes, bfloat16 and
// float32, Sum and Avg, and three steps of error feedback): the shards
// are the same bytes. Skips without a GPU.
func TestGPUComm(t *testing.T) {
	devs := cudatest.RequireDevices(t, 1)
	if more, err := cuda.DeviceCount(); err == nil && more >= 2 {
		devs = cudatest.RequireDevices(t, 2)
	}
	d := len(devs)
	// The buckets outlive the subtests (the error feedback follows them)
	// and go before the leak check of RequireDevices, registered earlier.
	t.Cleanup(func() { freeBuckets(t, devs) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, cfg := range []fp8grad.Config{{}, {Block: 7, ErrorFeedback: true}} {
		t.Run(fmt.Sprintf("block=%d/ef=%t", cfg.Block, cfg.ErrorFeedback), func(t *testing.T) {
			stores, err := nccltest.Stores(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { nccltest.CloseStores(stores) })
			gpu := make([]*fp8grad.Comm, d)
			streams := make([]*cuda.Stream, d)
			err = onAll(devs, func(r int, dev *cuda.Device) error {
				streams[r] = cudatest.Stream(t, dev)
				c, err := nccl.New(ctx, nccl.Config{Store: stores[r], Device: cudalink.PublicDevice(dev), Compute: cudalink.PublicStream(streams[r])})
				if err != nil {
					return err
				}
				gpu[r], err = fp8grad.NewDevice(c, cfg, cudalink.PublicStream(streams[r]))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				for _, c := range gpu {
					if c != nil {
						c.Close()
					}
				}
			})
			host := wrap(t, inproc.Communicators(d), cfg)
			for step, tc := range []rsCase{
				{300, cfg, buffer.BFloat16, collective.Avg},
				{300, cfg, buffer.BFloat16, collective.Avg},
				{129, cfg, buffer.Float32, collective.Sum},
				{300, cfg, buffer.BFloat16, collective.Avg},
			} {
				if err := gpuStep(ctx, devs, streams, gpu, host, tc, step); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			if g, h := gpu[0].ResidualBytes(), host[0].ResidualBytes(); g != h {
				t.Errorf("residual bytes: %d on the GPU, %d on the host", g, h)
			}
		})
	}
}

// gpuStep reduce-scatters the same gradients on the GPU ranks and the host
// ranks and compares the shards. The bucket of step 1 and 3 is the same
// device buffer (the error feedback residual follows it).
func gpuStep(ctx context.Context, devs []*cuda.Device, streams []*cuda.Stream, gpu, host []*fp8grad.Comm, tc rsCase, step int) error {
	d := len(devs)
	es := tc.dt.Size()
	vals := make([][]byte, d)
	for r := range d {
		x := input(uint64(step), r, d*tc.n, 64)
		if step == 0 && r == d-1 {
			x[5] = float32(math.NaN())
		}
		vals[r], _ = encode(x, tc.dt)
	}
	hostOut := make([]buffer.HostBuffer, d)
	err := onAll(host, func(r int, c *fp8grad.Comm) error {
		hostOut[r] = make(buffer.HostBuffer, tc.n*es)
		src := hostBucket(r, len(vals[r]))
		copy(src, vals[r])
		return collective.ReduceScatter(ctx, c, hostOut[r], src, tc.dt, tc.red)
	})
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	return onAll(gpu, func(r int, c *fp8grad.Comm) error {
		dev, s := devs[r], streams[r]
		src, err := bucket(dev, len(vals[r]))
		if err != nil {
			return err
		}
		dst, err := dev.Alloc(tc.n*es + 1)
		if err != nil {
			return err
		}
		defer dev.Free(dst)
		if err := s.Upload(src, vals[r]); err != nil {
			return err
		}
		db := func(p cuda.DevicePtr, n int) buffer.DeviceBuffer {
			return buffer.DeviceBuffer{Ptr: uintptr(p), Size: n, Device: dev.Ordinal()}
		}
		if err := collective.ReduceScatter(ctx, c, db(dst, tc.n*es), db(src, len(vals[r])), tc.dt, tc.red); err != nil {
			return err
		}
		got := make([]byte, tc.n*es)
		if err := s.Download(got, dst); err != nil {
			return err
		}
		if i := firstDiff(got, hostOut[r]); i >= 0 {
			return fmt.Errorf("rank %d: shard byte %d: GPU %#x, host %#x", r, i, got[i], hostOut[r][i])
		}
		return nil
	})
}

// buckets keeps one device buffer per (device, size), and hostBuckets one
// host buffer per (rank, size), so that steps of the same size reuse the
// same bucket as an optimizer does.
var (
	bucketsMu   sync.Mutex
	buckets     = map[[2]int]cuda.DevicePtr{}
	hostBuckets = map[[2]int]buffer.HostBuffer{}
)

func hostBucket(r, n int) buffer.HostBuffer {
	bucketsMu.Lock()
	defer bucketsMu.Unlock()
	key := [2]int{r, n}
	if _, ok := hostBuckets[key]; !ok {
		hostBuckets[key] = make(buffer.HostBuffer, n)
	}
	return hostBuckets[key]
}

func bucket(dev *cuda.Device, n int) (cuda.DevicePtr, error) {
	key := [2]int{dev.Ordinal(), n}
	bucketsMu.Lock()
	defer bucketsMu.Unlock()
	if p, ok := buckets[key]; ok {
		return p, nil
	}
	p, err := dev.Alloc(n)
	if err == nil {
		buckets[key] = p
	}
	return p, err
}

// freeBuckets frees the device buckets of devs.
func freeBuckets(t *testing.T, devs []*cuda.Device) {
	bucketsMu.Lock()
	defer bucketsMu.Unlock()
	for _, dev := range devs {
		for key, p := range buckets {
			if key[0] != dev.Ordinal() {
				continue
			}
			if err := dev.Free(p); err != nil {
				t.Errorf("free bucket: %v", err)
			}
			delete(buckets, key)
		}
	}
}
