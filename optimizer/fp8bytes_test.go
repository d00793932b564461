package optimizer_test

import (
	"context"
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/cpu"
)

// FP8HostBytes is the bytes Tensor copies, for every recipe, in the
// optimizer's own memory (ParamView.Data's), and after a step the bytes
// of the new gather; the wrong accessor, a high-precision parameter and an
// unknown name are refused with their sentinels.
func TestFP8HostBytes(t *testing.T) {
	ctx := context.Background()
	params := []optimizer.Param{{Name: "w", Shape: []int{3, 256}}, {Name: "b", Shape: []int{256}, HighPrecision: true}}
	init := map[string][]float32{"w": make([]float32, 768), "b": make([]float32, 256)}
	for i := range init["w"] {
		init["w"][i] = float32(i%19-9) / 7
	}
	for _, sc := range []fp8.Scaling{fp8.TensorCurrent, fp8.TensorDelayed, fp8.Block1x128, fp8.MXFP8} {
		t.Run(sc.String(), func(t *testing.T) {
			o, err := optimizer.New(ctx, inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(init), optimizer.Config{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: sc}})
			require.NoError(t, err)
			defer o.Close()
			for step := range 2 {
				b, err := o.FP8HostBytes("w")
				require.NoError(t, err)
				tensor, err := o.Tensor("w")
				require.NoError(t, err)
				assert.Equal(t, tensor.Data, b, "step %d", step)
				v, err := o.Param("w")
				require.NoError(t, err)
				hb := v.Data.(buffer.HostBuffer)
				assert.Equal(t, unsafe.SliceData(hb), unsafe.SliceData(b), "not the optimizer's own memory")
				g := make([]float32, 768)
				for i := range g {
					g[i] = float32(i%5) - 2
				}
				require.NoError(t, o.SetGrad("w", g))
				_, err = o.Step(ctx)
				require.NoError(t, err)
			}
		})
	}
	o, err := optimizer.New(ctx, inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(init), optimizer.Config{})
	require.NoError(t, err)
	defer o.Close()
	_, err = o.FP8DeviceBytes("w")
	assert.ErrorIs(t, err, collective.ErrMemoryKind)
	_, err = o.FP8HostBytes("b")
	assert.ErrorIs(t, err, optimizer.ErrConfig)
	_, err = o.FP8HostBytes("nope")
	assert.True(t, errors.Is(err, optimizer.ErrUnknownParam), "%v", err)
}
