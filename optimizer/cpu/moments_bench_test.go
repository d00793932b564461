package cpu

import (
	"fmt"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// BenchmarkUpdateMoments times the CPU update (AdamW, bfloat16 gradients,
// one 1x128-block FP8 parameter of 2^22 elements) with each storage of the
// moments, FP8 ones in blocks of 128. Bytes are the minimum moved: master
// 8, gradient 2, FP8 output 1 and its scales 4/128, each moment read and
// written (8, 4, or 2 + 8/128 for FP8 with its scale).
func BenchmarkUpdateMoments(b *testing.B) {
	const n, block = 1 << 22, backend.DefaultMomentBlock
	F32, BF16, FP8 := backend.MomentFloat32, backend.MomentBFloat16, backend.MomentFP8
	for _, c := range [][2]backend.MomentDType{{F32, F32}, {BF16, BF16}, {FP8, BF16}, {FP8, FP8}} {
		for _, w := range benchWorkers() {
			b.Run(fmt.Sprintf("m=%v/v=%v/workers=%d", c[0], c[1], w), func(b *testing.B) {
				be := New(w)
				a := benchCase{rule: backend.RuleAdamW, mt: buffer.Float32, gt: buffer.BFloat16, mode: backend.ModeBlock}.args(be, n)
				a.MType, a.VType, a.MomentBlock, a.MomentSeed = c[0], c[1], block, 1
				bufs := [2]*buffer.Buffer{&a.M, &a.V}
				scales := [2]*buffer.Buffer{&a.MScales, &a.VScales}
				per := 8 + 2 + 1 + 4.0/128
				for i, t := range c {
					buf, _ := be.Alloc(t.Bytes(n, block))
					*bufs[i] = buf.Slice(0, n*t.ElemBytes())
					if t == FP8 {
						*scales[i] = buf.Slice(n, buf.Len())
					}
					per += 2*float64(t.ElemBytes()) + 2*float64(t.ScaleBytes(block, block))/block
				}
				b.SetBytes(int64(per * n))
				b.ReportAllocs()
				for b.Loop() {
					if err := be.Update(a); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
