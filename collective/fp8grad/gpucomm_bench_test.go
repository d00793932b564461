package fp8grad_test

import (
	"context"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/nccl/nccltest"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/cudalink"
)

// BenchmarkGPUReduceScatter is the measurement of issue 19 on two GPUs: the
// reduce-scatter (Avg) of a bfloat16 gradient bucket of 128 Mi elements
// (256 MiB) per rank, as bfloat16 through NCCL (bf16) and in FP8 through
// NewDevice (fp8: quantize, all-to-all, sum; E4M3, blocks of 128). Run it
// in the three regimes by setting NCCL's environment (NVLink: nothing;
// NCCL_P2P_DISABLE=1; NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1) and compare
// the ns/op of fp8 with bf16's. Skips with fewer than two GPUs.
func BenchmarkGPUReduceScatter(b *testing.B) {
	devs := cudatest.RequireDevices(b, 2)
	const total = 128 << 20
	for _, mode := range []string{"bf16", "fp8"} {
		b.Run(mode, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			stores, err := nccltest.Stores(ctx, 2)
			if err != nil {
				b.Fatal(err)
			}
			defer nccltest.CloseStores(stores)
			comms := make([]collective.Communicator, 2)
			srcs := make([]buffer.DeviceBuffer, 2)
			dsts := make([]buffer.DeviceBuffer, 2)
			err = onAll(devs, func(r int, dev *cuda.Device) error {
				s := cudatest.Stream(b, dev)
				c, err := nccl.New(ctx, nccl.Config{Store: stores[r], Device: cudalink.PublicDevice(dev), Compute: cudalink.PublicStream(s)})
				if err != nil {
					return err
				}
				comms[r] = c
				if mode == "fp8" {
					if comms[r], err = fp8grad.NewDevice(c, fp8grad.Config{}, cudalink.PublicStream(s)); err != nil {
						return err
					}
				}
				src, dst := cudatest.Alloc(b, dev, 2*total), cudatest.Alloc(b, dev, total)
				srcs[r] = buffer.DeviceBuffer{Ptr: uintptr(src), Size: 2 * total, Device: dev.Ordinal()}
				dsts[r] = buffer.DeviceBuffer{Ptr: uintptr(dst), Size: total, Device: dev.Ordinal()}
				return s.Memset8(src, 0x3c, 2*total)
			})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					if c != nil {
						c.Close()
					}
				}
			}()
			b.SetBytes(2 * total)
			for b.Loop() {
				err := onAll(comms, func(r int, c collective.Communicator) error {
					return collective.ReduceScatter(ctx, c, dsts[r], srcs[r], buffer.BFloat16, collective.Avg)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			wire := 1.0 // bytes sent per bucket element: half the bucket, 2 bytes each
			if mode == "fp8" {
				wire = float64(fp8grad.PieceBytes(total/2, fp8grad.DefaultBlock)) / total
			}
			b.ReportMetric(wire, "wire-B/elem")
		})
	}
}
