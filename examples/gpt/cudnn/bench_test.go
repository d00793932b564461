package cudnn

import (
	"testing"
	"time"
)

// BenchmarkAttention times cuDNN's fused attention against the fused
// kernels of examples/gpt/kernels in the same run, at the GPT's 124M shape
// (batch 8, 12 heads of 64, seq 1024) and 1.3B shape (batch 4, 16 heads of
// 128, seq 2048): forward and backward of each, cuDNN reading the model's
// qkv in place, the kernels their packed heads (the copies the model's
// flash path makes first are timed apart, as flash/split), and cuDNN's
// backward in its repeatable form (Config.Repeatable, deterministic
// engines: what gpumodel builds) as cudnn/bwd-repeatable. causal-TFLOP/s
// counts the causal FLOPs of the products as BenchmarkFlashKernels does:
// forward 2·B·H·T²·D, backward 5·B·H·T²·D.
func BenchmarkAttention(b *testing.B) {
	d, lib, k := openGPU(b)
	for _, s := range []struct {
		name  string
		shape Shape
	}{{"124M", Shape{Batch: 8, Heads: 12, Seq: 1024, D: 64}}, {"1.3B", Shape{Batch: 4, Heads: 16, Seq: 2048, D: 128}}} {
		c := newGPUCase(b, d, lib, k, s.shape, 7)
		// The backward passes read what the forward passes keep.
		for _, step := range []func() error{c.cudnnFwd, c.flashSplit, c.flashFwd, c.st.Synchronize} {
			if err := step(); err != nil {
				b.Fatal(err)
			}
		}
		fwd, bwd := c.a.Workspace()
		b.Logf("%s: %v, plan workspaces %d and %d bytes", s.name, lib, fwd, bwd)
		acc := c.a
		rep := c.attention(b, lib, Config{Deterministic: true, Repeatable: true})
		_, rbwd := rep.Workspace()
		b.Logf("%s: the repeatable backward's plan workspace %d bytes", s.name, rbwd)
		repBwd := func() error { c.a = rep; err := c.cudnnBwd(); c.a = acc; return err }
		unit := float64(s.shape.Batch*s.shape.Heads) * float64(s.shape.Seq) * float64(s.shape.Seq) * float64(s.shape.D)
		for _, p := range []struct {
			name  string
			run   func() error
			flops float64
		}{
			{"cudnn/fwd", c.cudnnFwd, 2 * unit}, {"cudnn/bwd", c.cudnnBwd, 5 * unit}, {"cudnn/bwd-repeatable", repBwd, 5 * unit},
			{"flash/split", c.flashSplit, 0}, {"flash/fwd", c.flashFwd, 2 * unit}, {"flash/bwd", c.flashBwd, 5 * unit},
		} {
			b.Run(s.name+"/"+p.name, func(b *testing.B) {
				if err := p.run(); err != nil { // untimed: the engines load lazily
					b.Fatal(err)
				}
				if err := c.st.Synchronize(); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				for range b.N {
					if err := p.run(); err != nil {
						b.Fatal(err)
					}
				}
				if err := c.st.Synchronize(); err != nil {
					b.Fatal(err)
				}
				el := time.Since(start)
				b.ReportMetric(float64(el.Microseconds())/1e3/float64(b.N), "ms/op")
				if p.flops > 0 {
					b.ReportMetric(p.flops*float64(b.N)/el.Seconds()/1e12, "causal-TFLOP/s")
				}
			})
		}
	}
}
