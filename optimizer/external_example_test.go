package optimizer_test

import (
	"context"
	"fmt"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"
)

// Gradients lent by the caller: the framework's backward pass writes each
// bucket's gradient (BFloat16, the default GradType) at the layout's
// places, and the step reads it there. The optimizer holds no gradient
// buffer, and nothing is copied.
func ExampleOptimizer_BindGrads() {
	ctx := context.Background()
	params := []optimizer.Param{{Name: "w", Shape: []int{3}, HighPrecision: true}}
	init := optimizer.FromMap(map[string][]float32{"w": {1, 2, 3}})
	cfg := optimizer.Config{Rule: optimizer.RuleSGD, LR: optimizer.Constant(0.5), ExternalGradients: true, HighPrecisionType: buffer.Float32}
	o, err := optimizer.New(ctx, inproc.Communicators(1)[0], cpu.New(1), params, init, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Close()
	l := o.Layout()
	grads := make([]buffer.Buffer, len(l.Buckets)) // the framework's memory
	for b, bk := range l.Buckets {
		grads[b] = make(buffer.HostBuffer, 2*bk.Size) // zeros in the padding
	}
	pl := l.Places[0]
	g := []uint16{bf16.FromFloat32(1), bf16.FromFloat32(-1), bf16.FromFloat32(2)}
	copy(grads[pl.Bucket].(buffer.HostBuffer)[2*pl.Offset:], collective.ToBytes(g))
	if err := o.BindGrads(grads); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := o.Step(ctx); err != nil {
		fmt.Println(err)
		return
	}
	w, _ := o.Weights("w")
	fmt.Println("w:", w, "gradient bytes held:", o.Report().Get(optimizer.BufGrads))
	_, err = o.Step(ctx)
	fmt.Println("next step without binding:", err)
	// Output:
	// w: [0.5 2.5 2] gradient bytes held: 0
	// next step without binding: optimizer: Step: no gradient buffers bound (BindGrads)
}
