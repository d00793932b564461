package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	icuda "github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// newEngine opens GPU 0 and an engine on a new stream, or skips the test
// (fails it under DISTOPT_REQUIRE_GPU=1) when there is no GPU or no
// suitable cuBLASLt.
func newEngine(t testing.TB) *Engine {
	t.Helper()
	d := cudatest.Require(t)
	s, err := d.NewStream()
	cudatest.Unavailable(t, err)
	e, err := newOn(d, s)
	cudatest.Unavailable(t, err, ErrUnavailable)
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		s.Destroy()
	})
	return e
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// devAlloc allocates n bytes freed when the test ends.
func devAlloc(t testing.TB, d *icuda.Device, n int) icuda.DevicePtr {
	t.Helper()
	p, err := d.Alloc(max(n, 1))
	must(t, err)
	t.Cleanup(func() { d.Free(p) })
	return p
}

// randMatrix returns rows*cols normally distributed values whose rows have
// magnitudes spread over 2^-4..2^4 and whose 128-column blocks are scaled
// by 1, 2^3 or 2^-3 in turn, so that 1x128 block and 128x128 tile scales
// differ (a scale read from the wrong block or tile shows).
var blockFactor = [3]float64{1, 8, 0.125}

func randMatrix(rows, cols int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, rows*cols)
	for i := range rows {
		m := math.Ldexp(1, r.IntN(9)-4)
		for j := range cols {
			v[i*cols+j] = float32(r.NormFloat64() * m * blockFactor[j/128%3])
		}
	}
	return v
}

// hostOperand is an operand's bytes as the GEMM reads them.
type hostOperand struct {
	o      Operand
	codes  []byte
	scales []byte
}

// upload allocates o's buffers on the device and copies codes and scales.
func (h hostOperand) upload(t testing.TB, e *Engine) Operand {
	t.Helper()
	o := h.o
	o.Data = cuda.DevicePtr(devAlloc(t, e.d, len(h.codes)))
	o.ScaleInv = cuda.DevicePtr(devAlloc(t, e.d, len(h.scales)))
	must(t, e.s.Upload(icuda.DevicePtr(o.Data), h.codes))
	must(t, e.s.Upload(icuda.DevicePtr(o.ScaleInv), h.scales))
	return o
}

// download reads an operand's codes and scales back.
func download(t testing.TB, e *Engine, o Operand) hostOperand {
	t.Helper()
	sr, sc := o.stored()
	h := hostOperand{o: o, codes: make([]byte, sr*sc), scales: make([]byte, ScaleBytes(sr, sc, o.Scales))}
	must(t, e.s.Download(h.codes, icuda.DevicePtr(o.Data)))
	must(t, e.s.Download(h.scales, icuda.DevicePtr(o.ScaleInv)))
	return h
}

// weight quantizes a rows x cols matrix on the CPU with recipe r.
func weight(t testing.TB, v []float32, rows, cols int, r fp8.Recipe) hostOperand {
	t.Helper()
	var h *fp8.AmaxHistory
	if r.Scaling == fp8.TensorDelayed {
		h = r.NewHistory()
		h.Push(fp8.Amax(v) * 1.5) // an earlier step's amax
	}
	tn, err := fp8.Quantize(v, []int{rows, cols}, r, h)
	must(t, err)
	l, err := LayoutOf(r)
	must(t, err)
	scales := icuda.Bytes(tn.ScaleInv)
	if r.Scaling == fp8.MXFP8 {
		scales = tn.ScaleE8M0
	}
	return hostOperand{o: Operand{Rows: rows, Cols: cols, Format: r.Format, Scales: l}, codes: tn.Data, scales: scales}
}

// decode returns the logical Rows x Cols values of an operand in float64:
// code decoded times its scale_inv, as the fp8 package defines them; with
// bf16 set, each value rounded to bfloat16 first (what the fallback
// multiplies).
func (h hostOperand) decode(bf16 bool) []float64 {
	o := h.o
	sr, sc := o.stored()
	f32 := func(k int) float32 {
		return math.Float32frombits(uint32(h.scales[4*k]) | uint32(h.scales[4*k+1])<<8 | uint32(h.scales[4*k+2])<<16 | uint32(h.scales[4*k+3])<<24)
	}
	out := make([]float64, sr*sc)
	for i := range sr {
		for j := range sc {
			idx := i*sc + j
			var inv float32
			switch o.Scales {
			case PerTensor:
				inv = f32(0)
			case Tiles128:
				inv = f32(fp8.TileIndex(idx, sc, 128))
			case Rows128:
				inv = f32(j/128*sr + i)
			case Flat128:
				inv = f32(idx / 128)
			case MX32:
				inv = fp8.E8M0Value(h.scales[idx/32])
			}
			x := o.Format.Decode(h.codes[idx]) * inv
			if bf16 {
				x = fp8.RoundBF16(x)
			}
			r, c := i, j
			if o.Transposed {
				r, c = j, i
			}
			out[r*o.Cols+c] = float64(x)
		}
	}
	return out
}
