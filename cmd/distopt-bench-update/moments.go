package main

import (
	"fmt"
	"math"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// moments times the one-pass Block1x128 update (bfloat16 gradients) with
// each storage of the optimizer state and prints two tables, AdamW by
// moment storage and SGD with momentum by momentum storage: bytes moved per
// element (master 4+4, gradient 2, FP8 byte 1 and its block scale 4/128,
// each moment read and written: 4+4, 2+2, or 1+1 and 8/block for its
// scale), bandwidth, ratio to the copy, and speed-up over float32 state.
func (x *bench) moments(copyBW float64, master, grad, out, blocks buffer.Buffer) error {
	const block = backend.DefaultMomentBlock
	F32, BF16, FP8 := backend.MomentFloat32, backend.MomentBFloat16, backend.MomentFP8
	fmt.Printf("\nAdamW + Block1x128 E4M3 in one pass, bfloat16 gradients, by moment storage (FP8 moments: blocks of %d, second moment's root rounded stochastically by a dither, one hash per two elements)\n\n", block)
	adamw := [][]backend.MomentDType{{F32, F32}, {BF16, BF16}, {FP8, BF16}, {FP8, FP8}}
	if err := x.stateTable(copyBW, master, grad, out, blocks, backend.RuleAdamW, "moments m / v", adamw); err != nil {
		return err
	}
	fmt.Printf("\nSGD (momentum 0.9) + Block1x128 E4M3 in one pass, bfloat16 gradients, by momentum storage (FP8: blocks of %d)\n\n", block)
	sgd := [][]backend.MomentDType{{F32}, {BF16}, {FP8}}
	return x.stateTable(copyBW, master, grad, out, blocks, backend.RuleSGD, "momentum", sgd)
}

// stateTable prints the table of rule over the storages of its state
// (AdamW: m and v; SGD: the momentum), the first row the baseline of the
// speed-up.
func (x *bench) stateTable(copyBW float64, master, grad, out, blocks buffer.Buffer, rule backend.Rule, head string, combos [][]backend.MomentDType) error {
	b, n := x.b, x.n
	const block = backend.DefaultMomentBlock
	segs, _ := layout(n, 64, backend.ModeBlock)
	fmt.Printf("| %s | time | bytes moved/elem | GB/s | of copy | speed-up over fp32 |\n", head)
	fmt.Println("|---|---|---|---|---|---|")
	var base time.Duration
	for _, c := range combos {
		bufs := make([]buffer.Buffer, len(c))
		var err error
		for i, t := range c {
			if bufs[i], err = b.Alloc(t.Bytes(n, block)); err != nil {
				return err
			}
		}
		free := func() {
			for _, buf := range bufs {
				b.Free(buf)
			}
		}
		a := &backend.UpdateArgs{Rule: rule, N: n, Master: master, MomentType: buffer.Float32,
			MType: c[0], MomentBlock: block, MomentSeed: 1, Grad: grad, GradType: buffer.BFloat16,
			Segments: segs, Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, FP8: out, BlockScales: blocks,
			Hyper: backend.Hyper{GradScale: 1, Beta1: 0.9, Beta2: 0.999, OneMinusBeta1: float32(1 - 0.9),
				OneMinusBeta2: float32(1 - 0.999), Eps: 1e-8, SqrtVCorrection: float32(1 / math.Sqrt(1-0.999)), Momentum: 0.9}}
		a.M = bufs[0].Slice(0, n*c[0].ElemBytes())
		if c[0] == backend.MomentFP8 {
			a.MScales = bufs[0].Slice(n, bufs[0].Len())
		}
		name := c[0].String()
		if len(c) > 1 {
			a.VType, a.V = c[1], bufs[1].Slice(0, n*c[1].ElemBytes())
			if c[1] == backend.MomentFP8 {
				a.VScales = bufs[1].Slice(n, bufs[1].Len())
			}
			name += " / " + c[1].String()
		}
		t, err := x.timeIt(func() error { return b.Update(a) })
		free()
		if err != nil {
			return fmt.Errorf("%v state %s: %w", rule, name, err)
		}
		if base == 0 {
			base = t
		}
		per := 8 + 2 + 1 + 4.0/128
		for _, m := range c {
			per += 2*float64(m.ElemBytes()) + 2*float64(m.ScaleBytes(block, block))/block
		}
		bw := per * float64(n) / t.Seconds() / 1e9
		fmt.Printf("| %s | %.3f ms | %.2f | %.0f | %.0f%% | %.2fx |\n", name, ms(t), per, bw, 100*bw/copyBW, base.Seconds()/t.Seconds())
	}
	return nil
}
