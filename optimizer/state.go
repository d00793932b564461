package optimizer

import (
	"context"
	"fmt"

	"github.com/distopt/distopt/buffer"
)

// PieceState is the optimizer state of the part of one parameter this rank
// owns: elements [Offset, Offset+len(Master)) of the flattened parameter.
type PieceState struct {
	Param  string
	Offset int
	Master []float32
	M, V   []float32 // moments, widened to float32 (V is nil for SGD)
}

// ReadPieces copies this rank's master weights and moments to the host.
func (o *Optimizer) ReadPieces() ([]PieceState, error) {
	if err := o.usable(); err != nil {
		return nil, err
	}
	var out []PieceState
	for _, bk := range o.buckets {
		for _, pc := range bk.pieces {
			ps := PieceState{Param: o.params[pc.Param].Name, Offset: pc.ParamOffset}
			var err error
			if ps.Master, err = o.readElems(bk.master, pc.ShardOffset, pc.Len, buffer.Float32); err != nil {
				return nil, err
			}
			if ps.M, err = o.readMoment(bk, 0, pc); err != nil {
				return nil, err
			}
			if bk.v != nil {
				if ps.V, err = o.readMoment(bk, 1, pc); err != nil {
					return nil, err
				}
			}
			out = append(out, ps)
		}
	}
	return out, nil
}

// readElems reads n elements of type dt starting at element off*4/size.
func (o *Optimizer) readElems(b buffer.Buffer, off4, n int, dt buffer.DType) ([]float32, error) {
	raw := make([]byte, n*dt.Size())
	if err := o.backend.Read(raw, b, off4*4); err != nil {
		return nil, err
	}
	return decodeElems(raw, dt), nil
}

// PieceSetter fills the state of a piece: the master and moments of elements
// [offset, offset+len(master)) of the named parameter. m and v are nil when
// the rule has no such moment.
type PieceSetter func(name string, offset int, master, m, v []float32) error

// LoadPieces replaces this rank's masters and moments with what set gives,
// then recomputes and gathers the parameters (as New does) before it
// returns, so the optimizer is never left half-loaded: on any error, on
// this rank or another, every rank returns an error and is marked broken.
// All ranks must call it together.
func (o *Optimizer) LoadPieces(ctx context.Context, set PieceSetter) error {
	if err := o.usable(); err != nil {
		return err
	}
	if err := o.waitAllGathers(ctx); err != nil {
		return err
	}
	if err := o.agree(ctx, o.setPieces(set)); err != nil {
		return o.fail(err)
	}
	return o.refreshState(ctx)
}

// setPieces writes what set gives into this rank's masters and moments.
func (o *Optimizer) setPieces(set PieceSetter) error {
	for _, bk := range o.buckets {
		for _, pc := range bk.pieces {
			master := make([]float32, pc.Len)
			m := make([]float32, pc.Len)
			var v []float32
			if bk.v != nil {
				v = make([]float32, pc.Len)
			}
			if err := set(o.params[pc.Param].Name, pc.ParamOffset, master, m, v); err != nil {
				return fmt.Errorf("optimizer: loading %q: %w", o.params[pc.Param].Name, err)
			}
			if err := o.backend.Write(bk.master, 4*pc.ShardOffset, float32Bytes(master)); err != nil {
				return err
			}
			if err := o.writeMoment(bk, 0, pc, m); err != nil {
				return err
			}
			if v != nil {
				if err := o.writeMoment(bk, 1, pc, v); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ScalarState is the small state every rank holds in full: the step count,
// the loss scaler and the amax histories of delayed scaling.
type ScalarState struct {
	Step          int
	LossScale     float64
	LossScaleGood int
	AmaxHistories [][]float32 // one per FP8 parameter (delayed scaling), oldest first
	// CastScales are the scales the FP8 bytes held now were cast with
	// (delayed scaling), so that a reload recasts the same bytes.
	CastScales []float32
}

// Scalars returns the scalar state.
func (o *Optimizer) Scalars() ScalarState {
	o.settled()
	if err := o.pullHistories(); err != nil {
		return ScalarState{Step: o.step} // the optimizer is broken: usable reports it
	}
	s := ScalarState{Step: o.step}
	if o.cfg.LossScaler != nil {
		s.LossScale, s.LossScaleGood = o.cfg.LossScaler.scale, o.cfg.LossScaler.good
	}
	s.AmaxHistories = o.scales.Histories()
	if s.AmaxHistories != nil {
		s.CastScales = append([]float32(nil), o.scales.Cast...)
	}
	return s
}

// SetScalars restores the scalar state; it takes effect with the next
// LoadPieces, which must follow.
func (o *Optimizer) SetScalars(s ScalarState) error {
	n := len(o.scales.history)
	if len(s.AmaxHistories) != n || len(s.CastScales) != n {
		return fmt.Errorf("optimizer: state has %d amax histories and %d cast scales, this configuration %d: %w", len(s.AmaxHistories), len(s.CastScales), n, ErrConfig)
	}
	o.settled() // a pending decision must not overwrite the state set here
	if err := o.pullHistories(); err != nil {
		return err
	}
	for _, h := range s.AmaxHistories {
		if len(h) != o.cfg.Recipe.History() {
			return fmt.Errorf("optimizer: saved amax history of length %d, recipe wants %d: %w", len(h), o.cfg.Recipe.History(), ErrConfig)
		}
	}
	o.step = s.Step
	if o.cfg.LossScaler != nil {
		o.cfg.LossScaler.scale, o.cfg.LossScaler.good = s.LossScale, s.LossScaleGood
	}
	o.pending = &s
	o.control.dirty = true
	return nil
}

// refreshState recasts and gathers after a load. With delayed scaling the
// histories and the scales of the bytes held at save time are restored, so
// the bytes are recast exactly as they were and the next step casts with the
// same scale as an uninterrupted run.
func (o *Optimizer) refreshState(ctx context.Context) error {
	if o.pending == nil {
		return o.refresh(ctx, castFirst)
	}
	o.scales.Restore(o.pending.AmaxHistories, o.pending.CastScales)
	o.pending = nil
	if o.nSlots > 0 {
		if err := o.backend.Write(o.scale, 0, float32Bytes(o.scales.Scale)); err != nil {
			return o.fail(err)
		}
	}
	return o.refresh(ctx, castReload)
}
