package optimizer

import (
	"fmt"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
)

// GradView is where the training framework writes one parameter's full
// gradient (every rank writes its own; Step averages them). With sharded
// gradients (Config.ShardedGradients) Data lies in a buffer of the pool
// lent to the parameter's bucket: it is valid only until the bucket is
// declared ready (GradReady of its last parameter for the micro-batch)
// and must then be fetched again (Grad) for the next micro-batch; Valid
// tells.
type GradView struct {
	Name  string
	Shape []int
	DType buffer.DType  // Config.GradType
	Data  buffer.Buffer // len = elements x DType.Size(), in the backend's memory

	lease *viewLease // the pool lease behind Data (sharded gradients)
}

// ParamView is one parameter as the model reads it after a step: FP8 bytes
// with their scale_inv, or the high-precision copy.
type ParamView struct {
	Name          string
	Shape         []int
	HighPrecision bool
	// DType is Uint8 for FP8 parameters, else Config.HighPrecisionType.
	DType  buffer.DType
	Format fp8.Format // FP8 parameters
	Recipe fp8.Recipe // FP8 parameters
	Data   buffer.Buffer
	// ScaleInv holds the float32 scale_inv values (one per tensor, block or
	// tile, in the recipe's order), or for MXFP8 the E8M0 bytes. Nil for
	// high-precision parameters.
	ScaleInv buffer.Buffer
}

func (o *Optimizer) place(name string) (int, error) {
	i := o.layout.Index(name)
	if i < 0 {
		return -1, fmt.Errorf("optimizer: %q: %w", name, ErrUnknownParam)
	}
	return i, nil
}

// Grad returns the gradient view of the named parameter. With sharded
// gradients it lends the parameter's bucket a zeroed buffer of the pool
// when it has none; ErrGradPool when every buffer is lent to a bucket not
// yet declared ready, ErrGradReady when the parameter was already declared
// ready for the micro-batch its bucket's buffer holds.
func (o *Optimizer) Grad(name string) (GradView, error) {
	if o.buckets == nil {
		return GradView{}, ErrClosed
	}
	i, err := o.place(name)
	if err != nil {
		return GradView{}, err
	}
	if err := o.needGrads("Grad", name); err != nil {
		return GradView{}, err
	}
	o.markGrad()
	if o.pool != nil {
		if err := o.usable(); err != nil {
			return GradView{}, err
		}
		o.pipe.mu.Lock()
		defer o.pipe.mu.Unlock()
		return o.poolView(i)
	}
	pl := o.layout.Places[i]
	sz := o.cfg.GradType.Size()
	bk := o.buckets[pl.Bucket]
	return GradView{Name: name, Shape: o.params[i].Shape, DType: o.cfg.GradType, Data: bk.grad.Slice(sz*pl.Offset, sz*(pl.Offset+pl.Len))}, nil
}

// SetGrad writes a float32 gradient (rounded to the gradient type) into the
// named parameter's gradient view. It may run concurrently with SetGrad and
// GradReady calls for other parameters; it refuses (ErrGradReady) a
// parameter whose bucket's reduce-scatter is in flight.
//
// With sharded gradients it writes into the pool buffer lent to the
// parameter's bucket (see Grad), under the lock GradReady takes, so that
// the bucket's reduce-scatter cannot start during the write.
func (o *Optimizer) SetGrad(name string, g []float32) error {
	if err := o.needGrads("SetGrad", name); err != nil {
		return err
	}
	o.markGrad()
	if o.pool != nil {
		if _, err := o.place(name); err != nil {
			return err
		}
		o.pipe.mu.Lock()
		defer o.pipe.mu.Unlock()
		if err := o.usable(); err != nil {
			return err
		}
		v, err := o.poolView(o.pipe.index[name])
		if err != nil {
			return err
		}
		return o.writeGrad(v, g)
	}
	v, err := o.Grad(name)
	if err != nil {
		return err
	}
	if err := o.inFlight(o.layout.Places[o.pipe.index[name]].Bucket, fmt.Sprintf("SetGrad(%q)", name)); err != nil {
		return err
	}
	return o.writeGrad(v, g)
}

// writeGrad writes g, rounded to the gradient type, into view v.
func (o *Optimizer) writeGrad(v GradView, g []float32) error {
	if len(g)*v.DType.Size() != v.Data.Len() {
		return fmt.Errorf("optimizer: gradient of %q has %d elements, want %d: %w", v.Name, len(g), v.Data.Len()/v.DType.Size(), ErrConfig)
	}
	return o.backend.Write(v.Data, 0, encodeElems(g, v.DType))
}

func encodeElems(x []float32, dt buffer.DType) []byte {
	if dt == buffer.Float32 {
		return float32Bytes(x)
	}
	b := make([]byte, 2*len(x))
	for i, f := range x {
		h := bf16.FromFloat32(f)
		b[2*i], b[2*i+1] = byte(h), byte(h>>8)
	}
	return b
}

func decodeElems(b []byte, dt buffer.DType) []float32 {
	if dt == buffer.Float32 {
		return bytesFloat32(b)
	}
	x := make([]float32, len(b)/2)
	for i := range x {
		x[i] = bf16.ToFloat32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
	}
	return x
}

// Param returns the view of the named parameter as gathered by the last
// step (or by New, or a checkpoint load).
func (o *Optimizer) Param(name string) (ParamView, error) {
	if err := o.usable(); err != nil {
		return ParamView{}, err
	}
	i, err := o.place(name)
	if err != nil {
		return ParamView{}, err
	}
	p := o.params[i]
	pl := o.layout.Places[i]
	if err := o.gathered(name, pl.Bucket); err != nil {
		return ParamView{}, err
	}
	bk := o.buckets[pl.Bucket]
	v := ParamView{Name: name, Shape: p.Shape, HighPrecision: p.HighPrecision}
	if p.HighPrecision {
		sz := o.cfg.HighPrecisionType.Size()
		v.DType = o.cfg.HighPrecisionType
		v.Data = bk.data.Slice(sz*pl.Offset, sz*(pl.Offset+pl.Len))
		return v, nil
	}
	v.DType, v.Format, v.Recipe = buffer.Uint8, o.cfg.Recipe.Format, o.cfg.Recipe
	r := o.cfg.Recipe
	v.Data = bk.data.Slice(r.DataBytes(pl.Offset), r.DataBytes(pl.Offset+pl.Len))
	n := r.NumScales(p.Shape)
	if bk.blocks != nil {
		first := r.BlockScaleBytes(pl.Offset)
		v.ScaleInv = bk.blocks.Slice(first, first+n*r.ScaleType().Size())
	} else {
		s := o.slotOf[i]
		v.ScaleInv = o.scaleIn.Slice(4*s, 4*(s+n))
	}
	return v, nil
}

// Tensor copies the named FP8 parameter, bytes and scales, into an
// fp8.Tensor on the host.
func (o *Optimizer) Tensor(name string) (*fp8.Tensor, error) {
	v, err := o.Param(name)
	if err != nil {
		return nil, err
	}
	if v.HighPrecision {
		return nil, fmt.Errorf("optimizer: %q is a high-precision parameter, not FP8", name)
	}
	t := &fp8.Tensor{Data: make([]byte, v.Data.Len()), Shape: v.Shape, Format: v.Format, Recipe: v.Recipe}
	if err := o.backend.Read(t.Data, v.Data, 0); err != nil {
		return nil, err
	}
	raw := make([]byte, v.ScaleInv.Len())
	if err := o.backend.Read(raw, v.ScaleInv, 0); err != nil {
		return nil, err
	}
	if v.Recipe.ScaleType() == fp8.ScaleE8M0 {
		t.ScaleE8M0 = raw
		t.ScaleInv = make([]float32, len(raw))
		for k, e := range raw {
			t.ScaleInv[k] = fp8.E8M0Value(e)
		}
	} else {
		t.ScaleInv = bytesFloat32(raw)
	}
	return t, nil
}

// Weights returns the named parameter as the model sees it, in float32: the
// FP8 bytes dequantized with their scale_inv, or the high-precision copy.
func (o *Optimizer) Weights(name string) ([]float32, error) {
	v, err := o.Param(name)
	if err != nil {
		return nil, err
	}
	if v.HighPrecision {
		raw := make([]byte, v.Data.Len())
		if err := o.backend.Read(raw, v.Data, 0); err != nil {
			return nil, err
		}
		return decodeElems(raw, v.DType), nil
	}
	t, err := o.Tensor(name)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(t.Data))
	return out, t.Dequantize(out)
}
