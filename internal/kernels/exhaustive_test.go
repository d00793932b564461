package kernels

import (
	"math"
	"testing"
	"time"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// sweepOutput is one kernel output checked by TestExhaustive.
type sweepOutput struct {
	name string
	set  *Set
	run  func(s *cuda.Stream, in cuda.DevicePtr, n int) error
	size int // bytes per element
	ref  func(r *sweepRefs) any
	dev  cuda.DevicePtr
	host *cuda.HostBuffer
	log  mismatchLog
}

// sweepRefs holds the CPU reference of one chunk.
type sweepRefs struct {
	e4m3, e5m2 []uint8
	bf16       []uint16
}

// TestExhaustive runs every conversion kernel on all 2^32 float32 bit
// patterns, in every variant the device supports, and compares each output
// byte with the fp8 package: EncodeFP8 and CastScaled with scale 1 (whose
// product is x itself) for E4M3 and E5M2, and BF16FromFloat32. The inputs are
// made on the device (FillIota); the CPU reference of a chunk is computed
// while the GPU works on it.
func TestExhaustive(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	const chunk = 1 << 28
	in := cudatest.Alloc(t, d, 4*chunk)
	amax := cudatest.Alloc(t, d, 4*2*len(sets))
	must(t, s.Memset32(amax, 0, 2*len(sets)))

	var outs []*sweepOutput
	for vi, k := range sets {
		for fi, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			ref := func(r *sweepRefs) any { return r.e4m3 }
			if f == fp8.E5M2 {
				ref = func(r *sweepRefs) any { return r.e5m2 }
			}
			am := amax.Add(4 * (2*vi + fi))
			enc := &sweepOutput{name: "encode_" + f.String() + "_" + k.v.String(), set: k, size: 1, ref: ref}
			enc.run = func(s *cuda.Stream, src cuda.DevicePtr, n int) error { return k.EncodeFP8(s, enc.dev, src, n, f) }
			cast := &sweepOutput{name: "cast_scaled_1_" + f.String() + "_" + k.v.String(), set: k, size: 1, ref: ref}
			cast.run = func(s *cuda.Stream, src cuda.DevicePtr, n int) error {
				return k.CastScaled(s, cast.dev, src, n, 1, f, am)
			}
			outs = append(outs, enc, cast)
		}
		bf := &sweepOutput{name: "bf16_" + k.v.String(), set: k, size: 2, ref: func(r *sweepRefs) any { return r.bf16 }}
		bf.run = func(s *cuda.Stream, src cuda.DevicePtr, n int) error { return k.BF16FromFloat32(s, bf.dev, src, n) }
		outs = append(outs, bf)
	}
	for _, o := range outs {
		o.dev = cudatest.Alloc(t, d, o.size*chunk)
		o.host = cudatest.AllocHost(t, d, o.size*chunk)
	}
	refs := &sweepRefs{e4m3: make([]uint8, chunk), e5m2: make([]uint8, chunk), bf16: make([]uint16, chunk)}
	ev := make([]*cuda.Event, 3)
	for i := range ev {
		e, err := d.NewEvent(true)
		must(t, err)
		t.Cleanup(func() { e.Destroy() })
		ev[i] = e
	}

	var gpuKernels, gpuCopies, cpuRef, cpuCompare time.Duration
	start := time.Now()
	for base := uint64(0); base < 1<<32; base += chunk {
		b32 := uint32(base)
		must(t, ev[0].Record(s))
		must(t, sets[0].FillIota(s, in, b32, chunk))
		for _, o := range outs {
			must(t, o.run(s, in, chunk))
		}
		must(t, ev[1].Record(s))
		for _, o := range outs {
			must(t, s.CopyDtoH(o.host.Bytes(), o.dev))
		}
		must(t, ev[2].Record(s))

		t0 := time.Now()
		parallelFor(chunk, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x := math.Float32frombits(b32 + uint32(i))
				refs.e4m3[i] = fp8.E4M3.Encode(x)
				refs.e5m2[i] = fp8.E5M2.Encode(x)
				refs.bf16[i] = bf16.FromFloat32(x)
			}
		})
		cpuRef += time.Since(t0)
		must(t, s.Synchronize())
		gpuKernels += elapsed(t, ev[0], ev[1])
		gpuCopies += elapsed(t, ev[1], ev[2])

		t0 = time.Now()
		for _, o := range outs {
			switch want := o.ref(refs).(type) {
			case []uint8:
				compareChunk(&o.log, o.host.Bytes(), want, b32)
			case []uint16:
				compareChunk(&o.log, cuda.View[uint16](o.host.Bytes()), want, b32)
			}
		}
		cpuCompare += time.Since(t0)
	}
	t.Logf("2^32 inputs, %d outputs: wall %v; GPU kernels %v, device-to-host copies %v (%.1f GB/s); CPU reference %v, compare %v",
		len(outs), time.Since(start).Round(time.Millisecond), gpuKernels, gpuCopies,
		float64(totalBytes(outs))*(1<<32)/gpuCopies.Seconds()/1e9, cpuRef.Round(time.Millisecond), cpuCompare.Round(time.Millisecond))

	for _, o := range outs {
		t.Run(o.name, func(t *testing.T) {
			if o.log.total != 0 {
				t.Errorf("GPU differs from the fp8 package: %v", &o.log)
			}
		})
	}
	got := make([]uint32, 2*len(sets))
	must(t, s.Download(cuda.Bytes(got), amax))
	for i, a := range got {
		// The largest |x| in bit order is the NaN 0x7fffffff.
		if a != 0x7fffffff {
			t.Errorf("amax %d of the sweep = %#08x, want 0x7fffffff", i, a)
		}
	}
}

func totalBytes(outs []*sweepOutput) int {
	n := 0
	for _, o := range outs {
		n += o.size
	}
	return n
}

func elapsed(t testing.TB, a, b *cuda.Event) time.Duration {
	t.Helper()
	d, err := cuda.Elapsed(a, b)
	must(t, err)
	return d
}

// TestProbes logs what each kernel gives for the inputs whose treatment a
// reader may want to see spelled out (NaNs of either sign and payload,
// infinities, signed zeros, the edges of each range), and checks them
// against the fp8 package.
func TestProbes(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	probes := []uint32{
		0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0xffffffff, 0x7fa00000, 0xffbfffff,
		0x7f800000, 0xff800000, 0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff,
		math.Float32bits(448), math.Float32bits(464), math.Float32bits(464.00003), math.Float32bits(-480),
		math.Float32bits(57344), math.Float32bits(61440), math.Float32bits(61439.996), math.Float32bits(-1e30),
		math.Float32bits(0x1p-9), math.Float32bits(0x1p-10), math.Float32bits(0x1.000002p-10), math.Float32bits(-0x1p-10),
		math.Float32bits(0x1p-16), math.Float32bits(0x1p-17), math.Float32bits(0x1.000002p-17), math.Float32bits(-0x1p-17),
		math.Float32bits(1), math.Float32bits(-2), math.Float32bits(1000),
	}
	n := len(probes)
	in, out := cudatest.Alloc(t, d, 4*n), cudatest.Alloc(t, d, 2*n)
	must(t, s.Upload(in, cuda.Bytes(probes)))
	for _, k := range sets {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			got := make([]byte, n)
			must(t, k.EncodeFP8(s, out, in, n, f))
			must(t, s.Download(got, out))
			for i, b := range probes {
				want := f.Encode(math.Float32frombits(b))
				t.Logf("%v %v encode %#08x (%-10g) -> gpu %#02x cpu %#02x", k.v, f, b, math.Float32frombits(b), got[i], want)
				if got[i] != want {
					t.Errorf("%v %v encode %#08x: gpu %#02x, cpu %#02x", k.v, f, b, got[i], want)
				}
			}
		}
		got := make([]uint16, n)
		must(t, k.BF16FromFloat32(s, out, in, n))
		must(t, s.Download(cuda.Bytes(got), out))
		for i, b := range probes {
			if want := bf16.FromFloat32(math.Float32frombits(b)); got[i] != want {
				t.Errorf("%v bf16 %#08x: gpu %#04x, cpu %#04x", k.v, b, got[i], want)
			}
		}
	}
}

// TestDecodeAll decodes all 256 codes of each format in every variant and
// compares the float32 bits with fp8's Decode (NaN codes: fp8.DecodedNaN).
func TestDecodeAll(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	in, out := cudatest.Alloc(t, d, 256), cudatest.Alloc(t, d, 4*256)
	must(t, s.Upload(in, codes))
	for _, k := range sets {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			t.Run(k.v.String()+"_"+f.String(), func(t *testing.T) {
				got := make([]uint32, 256)
				must(t, k.DecodeFP8(s, out, in, 256, f))
				must(t, s.Download(cuda.Bytes(got), out))
				for c, g := range got {
					want := math.Float32bits(f.Decode(byte(c)))
					if g != want {
						t.Errorf("decode %#02x: gpu %#08x, cpu %#08x", c, g, want)
					}
				}
			})
		}
	}
}
