package cublaslt

import (
	"errors"
	"math"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// TestEpilogueSpec checks, without a GPU, the epilogue fields' checks:
// EpilogueBias with alignments that are powers of two from the bias type's
// size up to 256 (0: 256) passes, other alignments, unknown epilogues and
// bias fields without EpilogueBias are refused with ErrInvalid; the
// heuristic's bias address has exactly the spec's alignment (256: at
// least); Run's check
// refuses a null or less aligned bias before touching the device.
func TestEpilogueSpec(t *testing.T) {
	bias := func(align int) Spec { return Spec{Epilogue: EpilogueBias, BiasType: R16BF, BiasAlign: align} }
	for _, c := range []struct {
		name string
		s    Spec
		ok   bool
	}{
		{"none", Spec{}, true},
		{"default", Spec{Epilogue: EpilogueDefault}, true},
		{"bias 256", bias(0), true},
		{"bias 2", bias(2), true},
		{"bias 64", bias(64), true},
		{"bias 1", bias(1), false},
		{"bias 6", bias(6), false},
		{"bias 512", bias(512), false},
		{"float32 bias 2", Spec{Epilogue: EpilogueBias, BiasType: R32F, BiasAlign: 2}, false},
		{"gelu", Spec{Epilogue: 32}, false},
		{"bias type without bias", Spec{BiasType: R16BF}, false},
		{"alignment without bias", Spec{Epilogue: EpilogueDefault, BiasAlign: 16}, false},
	} {
		err := c.s.validateEpilogue()
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: %v, want ok %v (else ErrInvalid)", c.name, err, c.ok)
		}
	}
	for _, a := range []int{2, 4, 8, 16, 32, 64, 128, 256} {
		for _, base := range []cuda.DevicePtr{0, 0x7f0000001200, 0x7f00000012f0} {
			h := bias(a).biasHint(base)
			if low := h & -h; h == 0 || (low != uint64(a) && !(a == 256 && low > 256)) {
				t.Errorf("alignment %d from base %#x: hint %#x has alignment %d", a, uint64(base), h, low)
			}
		}
	}
	p := &Plan{spec: bias(16)}
	for _, c := range []struct {
		b  cuda.DevicePtr
		ok bool
	}{{0, false}, {0x1008, false}, {0x1002, false}, {0x1010, true}, {0x1100, true}} {
		if err := p.checkBias(c.b); c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("bias at %#x with alignment 16: %v, want ok %v (else ErrInvalid)", uint64(c.b), err, c.ok)
		}
	}
	if err := (&Plan{spec: Spec{}}).checkBias(0); err != nil {
		t.Errorf("no epilogue, no bias: %v", err)
	}
}

// TestBiasEpilogue multiplies all-ones E4M3 matrices (every product K, as
// in TestFP8Matmul) with EpilogueBias and a bfloat16 bias of small
// integers into bfloat16 and float32 D: every element of row i of D must
// be exactly K + bias[i] (all of them integers below 2^8, exact in
// bfloat16), which shows the bias read as bfloat16, one element per row of
// D, broadcast over the columns. A bias at a 16-byte offset runs with a
// plan of that alignment. A plan for a 2-byte aligned bias must be
// refused with ErrNotSupported: cuBLASLt 13's heuristic has no kernel for
// it (CUBLAS_STATUS_NOT_SUPPORTED, measured 2026-12-05 on an H200).
func TestBiasEpilogue(t *testing.T) {
	h, s := openHandle(t)
	d := h.Device()
	const m, n, k = 64, 48, 96
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	alloc := func(size int) cuda.DevicePtr {
		p, err := d.Alloc(size)
		must(err)
		t.Cleanup(func() { d.Free(p) })
		return p
	}
	a, b, dd, scales, ws, bias := alloc(m*k), alloc(n*k), alloc(4*m*n), alloc(32), alloc(1<<20), alloc(2*m+256)
	must(s.Memset8(a, 0x38, m*k)) // 1.0
	must(s.Memset8(b, 0x38, n*k))
	must(s.Memset32(scales, 0x3f800000, 8)) // 1
	bv := make([]uint16, m+1)
	for i := range bv {
		bv[i] = uint16(math.Float32bits(float32(i%37)-18) >> 16) // -18..18, exact
	}
	for _, c := range []struct {
		off   int
		align int
		dt    DataType
	}{{0, 0, R16BF}, {16, 16, R16BF}, {0, 0, R32F}} {
		bp := bias.Add(c.off)
		must(s.Upload(bp, cuda.Bytes(bv[:m])))
		spec := Spec{TransA: OpT, TransB: OpN,
			A: Matrix{Type: R8FE4M3, Rows: k, Cols: m, LD: k}, B: Matrix{Type: R8FE4M3, Rows: k, Cols: n, LD: k},
			C: Matrix{Type: c.dt, Rows: m, Cols: n, LD: m}, D: Matrix{Type: c.dt, Rows: m, Cols: n, LD: m},
			Epilogue: EpilogueBias, BiasType: R16BF, BiasAlign: c.align}
		plan, err := h.NewPlan(spec, 1<<20, scales, 1)
		must(err)
		args := &Args{A: a, B: b, C: dd, D: dd, AScale: scales, BScale: scales.Add(16), Bias: bp, Alpha: 1, Workspace: ws, WorkspaceSize: 1 << 20}
		must(plan.Run(s, args))
		got := make([]float32, m*n)
		if c.dt == R32F {
			must(s.Download(cuda.Bytes(got), dd))
		} else {
			raw := make([]uint16, m*n)
			must(s.Download(cuda.Bytes(raw), dd))
			for i, v := range raw {
				got[i] = math.Float32frombits(uint32(v) << 16)
			}
		}
		bad := 0
		for j := range n {
			for i := range m {
				want := float32(k) + math.Float32frombits(uint32(bv[i])<<16)
				if g := got[j*m+i]; g != want && bad < 3 {
					bad++
					t.Errorf("offset %d, D type %d: D[%d, %d] = %v, want %v", c.off, c.dt, i, j, g, want)
				}
			}
		}
		if err := plan.Run(s, &Args{A: a, B: b, C: dd, D: dd, AScale: scales, BScale: scales, Bias: bias.Add(2),
			Alpha: 1, Workspace: ws, WorkspaceSize: 1 << 20}); !errors.Is(err, ErrInvalid) {
			t.Errorf("a plan for a bias at offset %d given a bias at a 2-byte offset: %v, want ErrInvalid", c.off, err)
		}
		must(plan.Destroy())
	}
	spec := Spec{TransA: OpT, TransB: OpN,
		A: Matrix{Type: R8FE4M3, Rows: k, Cols: m, LD: k}, B: Matrix{Type: R8FE4M3, Rows: k, Cols: n, LD: k},
		C: Matrix{Type: R16BF, Rows: m, Cols: n, LD: m}, D: Matrix{Type: R16BF, Rows: m, Cols: n, LD: m},
		Epilogue: EpilogueBias, BiasType: R16BF, BiasAlign: 2}
	if plan, err := h.NewPlan(spec, 1<<20, scales, 1); err == nil {
		plan.Destroy()
		t.Error("a plan for a 2-byte aligned bias: no error, want ErrNotSupported")
	} else if !errors.Is(err, ErrNotSupported) {
		t.Errorf("a plan for a 2-byte aligned bias: %v, want ErrNotSupported", err)
	}
}

// openHandle opens GPU 0's cuBLASLt handle and a stream, both released
// when the test ends, or skips the test without a GPU or the library.
func openHandle(t *testing.T) (*Handle, *cuda.Stream) {
	t.Helper()
	d := cudatest.Require(t)
	lib, err := Default()
	cudatest.Unavailable(t, err, ErrNoLibrary)
	h, err := lib.NewHandle(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Destroy() })
	return h, cudatest.Stream(t, d)
}
