package main

import (
	"fmt"
	"math"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
)

// moments times the one-pass Block1x128 AdamW update (bfloat16 gradients)
// with each storage of the moments and prints its table: bytes moved per
// element (master 4+4, gradient 2, FP8 byte 1 and its block scale 4/128,
// each moment read and written: 4+4, 2+2, or 1+1 and 8/block for its
// scale), bandwidth, ratio to the copy, and speed-up over float32 moments.
func (x *bench) moments(copyBW float64, master, grad, out, blocks collective.Buffer) error {
	b, n := x.b, x.n
	const block = backend.DefaultMomentBlock
	F32, BF16, FP8 := backend.MomentFloat32, backend.MomentBFloat16, backend.MomentFP8
	combos := [][2]backend.MomentDType{{F32, F32}, {BF16, BF16}, {FP8, BF16}, {FP8, FP8}}
	segs, _ := layout(n, 64, backend.ModeBlock)
	fmt.Printf("\nAdamW + Block1x128 E4M3 in one pass, bfloat16 gradients, by moment storage (FP8 moments: blocks of %d, second moment's root rounded stochastically by a dither, one hash per two elements)\n\n", block)
	fmt.Println("| moments m / v | time | bytes moved/elem | GB/s | of copy | speed-up over fp32 moments |")
	fmt.Println("|---|---|---|---|---|---|")
	var base time.Duration
	for _, c := range combos {
		var bufs [2]collective.Buffer
		var err error
		for i, t := range c {
			if bufs[i], err = b.Alloc(t.Bytes(n, block)); err != nil {
				return err
			}
		}
		free := func() {
			b.Free(bufs[0])
			b.Free(bufs[1])
		}
		a := &backend.UpdateArgs{Rule: optimizer.RuleAdamW, N: n, Master: master, MomentType: collective.Float32,
			MType: c[0], VType: c[1], MomentBlock: block, MomentSeed: 1, Grad: grad, GradType: collective.BFloat16,
			Segments: segs, Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, FP8: out, BlockScales: blocks,
			Hyper: backend.Hyper{GradScale: 1, Beta1: 0.9, Beta2: 0.999, OneMinusBeta1: float32(1 - 0.9),
				OneMinusBeta2: float32(1 - 0.999), Eps: 1e-8, RBC2: float32(1 / math.Sqrt(1-0.999))}}
		a.M, a.V = bufs[0].Slice(0, n*c[0].ElemBytes()), bufs[1].Slice(0, n*c[1].ElemBytes())
		if c[0] == FP8 {
			a.MScales = bufs[0].Slice(n, bufs[0].Len())
		}
		if c[1] == FP8 {
			a.VScales = bufs[1].Slice(n, bufs[1].Len())
		}
		t, err := x.timeIt(func() error { return b.Update(a) })
		free()
		if err != nil {
			return fmt.Errorf("moments %v/%v: %w", c[0], c[1], err)
		}
		if base == 0 {
			base = t
		}
		per := 8 + 2 + 1 + 4.0/128
		for _, m := range c {
			per += 2*float64(m.ElemBytes()) + 2*float64(m.ScaleBytes(block, block))/block
		}
		bw := per * float64(n) / t.Seconds() / 1e9
		fmt.Printf("| %v / %v | %.3f ms | %.2f | %.0f | %.0f%% | %.2fx |\n", c[0], c[1], ms(t), per, bw, 100*bw/copyBW, base.Seconds()/t.Seconds())
	}
	return nil
}
