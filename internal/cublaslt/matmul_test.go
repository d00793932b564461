package cublaslt

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
)

// TestFP8Matmul multiplies all-ones E4M3 matrices (code 0x38) with scales
// 2 and 0.5 in the TN form Hopper's FP8 kernels take, so that every element
// of D is exactly K; shapes whose K is a multiple of 16 must run, the
// others must either run and give K or be refused with an error matching
// ErrNotSupported or ErrInvalid (never a wrong answer). It logs which
// shapes the library took. (cuBLASLt 13.1 refused K = 8, 24, 40 in the
// heuristic, and, in the first version of this test, a B scale at a 4-byte
// offset in cublasLtMatmul: the scales now lie 16 bytes apart.)
func TestFP8Matmul(t *testing.T) {
	h, s := openHandle(t)
	const m, n = 64, 32
	for _, k := range []int{8, 16, 24, 40, 48, 96} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) { checkOnes(t, h, s, m, n, k) })
	}
}

func checkOnes(t *testing.T, h *Handle, s *cuda.Stream, m, n, k int) {
	d := h.Device()
	bufs := map[string]int{"a": m * k, "b": n * k, "d": 2 * m * n, "scales": 32, "ws": 1 << 20}
	p := map[string]cuda.DevicePtr{}
	for name, size := range bufs {
		ptr, err := d.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Free(ptr)
		p[name] = ptr
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Memset8(p["a"], 0x38, m*k))
	must(s.Memset8(p["b"], 0x38, n*k))
	must(s.Memset32(p["scales"], 0x40000000, 1))         // 2
	must(s.Memset32(p["scales"].Add(16), 0x3f000000, 1)) // 0.5
	spec := Spec{TransA: OpT, TransB: OpN,
		A: Matrix{Type: R8FE4M3, Rows: k, Cols: m, LD: k}, B: Matrix{Type: R8FE4M3, Rows: k, Cols: n, LD: k},
		C: Matrix{Type: R16BF, Rows: m, Cols: n, LD: m}, D: Matrix{Type: R16BF, Rows: m, Cols: n, LD: m}}
	plan, err := h.NewPlan(spec, 1<<20, p["scales"], 1)
	if err == nil {
		defer plan.Destroy()
		err = plan.Run(s, &Args{A: p["a"], B: p["b"], C: p["d"], D: p["d"], AScale: p["scales"], BScale: p["scales"].Add(16),
			Alpha: 1, Workspace: p["ws"], WorkspaceSize: 1 << 20})
	}
	if err != nil {
		if k%16 == 0 || !(errors.Is(err, ErrNotSupported) || errors.Is(err, ErrInvalid)) {
			t.Fatalf("K=%d: %v", k, err)
		}
		t.Logf("K=%d refused: %v", k, err)
		return
	}
	out := make([]uint16, m*n)
	must(s.Download(cuda.Bytes(out), p["d"]))
	want := uint16(math.Float32bits(float32(k)) >> 16) // bfloat16 bits of K (a small integer, exact)
	for i, v := range out {
		if v != want {
			t.Fatalf("K=%d: D[%d] = %#04x, want %#04x (%d)", k, i, v, want, k)
		}
	}
	t.Logf("K=%d runs", k)
}
