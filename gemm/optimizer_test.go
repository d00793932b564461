package gemm

import (
	"context"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/cudalink"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// TestOptimizerViews runs the products on a weight as the optimizer's GPU
// backend gathered it (Weight reads its bytes and scales in place) and
// writes the weight gradient into the optimizer's gradient view (Gradient),
// for a per-tensor and a 128x128-tile recipe. The references decode the
// weight the optimizer reports (Optimizer.Tensor) and read the gradient
// back through the backend; a step then consumes the gradient.
func TestOptimizerViews(t *testing.T) {
	for _, r := range []fp8.Recipe{e4Current, e4Tiles} {
		t.Run(r.Scaling.String(), func(t *testing.T) { checkOptimizerViews(t, r) })
	}
}

func checkOptimizerViews(t *testing.T, r fp8.Recipe) {
	be, err := gpu.New(0)
	cudatest.Unavailable(t, err, gpu.ErrUnavailable)
	defer be.Close()
	const T, in, out = 64, 384, 256
	ctx := context.Background()
	params := []optimizer.Param{{Name: "w", Shape: []int{out, in}}}
	init := optimizer.FromMap(map[string][]float32{"w": randMatrix(out, in, 11)})
	cfg := optimizer.Config{Recipe: r, GradType: buffer.Float32}
	o, err := optimizer.New(ctx, single.New(buffer.Device, nil), be, params, init, cfg)
	must(t, err)
	defer o.Close()
	e, err := newOn(cudalink.Device(be.Device()), cudalink.Stream(be.Stream()))
	cudatest.Unavailable(t, err, ErrUnavailable)
	defer e.Close()

	pv, err := o.Param("w")
	must(t, err)
	w, err := Weight(pv.Data, pv.ScaleInv, pv.Shape, pv.Recipe)
	must(t, err)
	tn, err := o.Tensor("w")
	must(t, err)
	W := make([]float32, out*in)
	must(t, tn.Dequantize(W))

	act := recipeCase{x: e4Current, dy: e5Current, actLayout: PerTensor}
	if r.Scaling == fp8.Block128x128 {
		act = recipeCase{x: e4Blocks, dy: e5Blocks, actLayout: Rows128}
	}
	xv, dyv := randMatrix(T, in, 12), randMatrix(T, out, 13)
	x, hx := activation(t, e, act, act.x, xv, T, in, false)
	X := hx.decode(false)
	y := devAlloc(t, e.d, 2*T*out)
	res, err := e.Forward(BF16(cuda.DevicePtr(y)), x, w)
	must(t, err)
	checkPath(t, "forward", res, TensorCores)
	ref, mag := reference(T, out, in, func(p, k int) float64 { return X[p*in+k] }, func(q, k int) float64 { return float64(W[q*in+k]) })
	compare(t, "forward", readBF16(t, e, y, T*out), ref, mag, nil, false)

	xT, hxT := activation(t, e, act, act.x, xv, T, in, act.actLayout == Rows128)
	dyT, hdyT := activation(t, e, act, act.dy, dyv, T, out, act.actLayout == Rows128)
	XT, DYT := hxT.decode(false), hdyT.decode(false)
	gv, err := o.Grad("w")
	must(t, err)
	g, err := Gradient(gv.Data, gv.DType, false)
	must(t, err)
	_, err = e.WGrad(g, dyT, xT)
	must(t, err)
	must(t, e.s.Synchronize())
	raw := make([]byte, 4*out*in)
	must(t, be.Read(raw, gv.Data, 0))
	ref, mag = reference(out, in, T, func(p, k int) float64 { return DYT[k*out+p] }, func(q, k int) float64 { return XT[k*in+q] })
	compare(t, "wgrad in the optimizer's buffer", decodeOut(raw, buffer.Float32), ref, mag, nil, false)
	if _, err := o.Step(ctx); err != nil {
		t.Fatalf("step after the weight gradient: %v", err)
	}
	t.Logf("%v: scratch %d bytes", r, e.PeakScratch())
}
