package checkpoint

import (
	"bytes"
	"math"
	"slices"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// Delayed scaling: the exact scale of the held FP8 bytes.
//
// A reload recasts the FP8 bytes of delayed scaling with
// ScalarState.CastScales, which optimizer.Scalars derives as 1/scale_inv.
// For about one float32 scale s in six, 1/(1/s) != s: the reload would cast
// with a neighbour of s, and in a large tensor some element sits close
// enough to an FP8 rounding boundary to come out differently, so Load would
// fail with ErrVerify. Until the optimizer reports the scale it cast with,
// Save recovers it: among the float32 values s near the reported scale whose
// reciprocal is the held scale_inv (so that a reload also restores
// scale_inv), it keeps the first with which every rank's masters cast to
// exactly the FP8 bytes held. When the reported scale is exact it is the
// first candidate and is kept.

// maxScaleCandidates bounds the candidates (a mask of one byte per rank).
const maxScaleCandidates = 7

// scaleCandidates returns the float32 values within 3 ulps of c whose
// float32 reciprocal is inv: c first, then by distance from c.
func scaleCandidates(c, inv float32) []float32 {
	var out []float32
	try := func(s float32) {
		if 1/s == inv && !slices.Contains(out, s) && len(out) < maxScaleCandidates {
			out = append(out, s)
		}
	}
	try(c)
	lo, hi := c, c
	for range 3 {
		lo, hi = math.Nextafter32(lo, 0), math.Nextafter32(hi, math.MaxFloat32)
		try(lo)
		try(hi)
	}
	return out
}

// castScaleMasks returns, per FP8 parameter of o (delayed scaling only;
// nil otherwise), the candidate cast scales and a mask of those with which
// this rank's master pieces cast to the FP8 bytes held.
func castScaleMasks(o *optimizer.Optimizer, pieces []optimizer.PieceState) ([][]float32, []byte, error) {
	s := o.Scalars()
	if len(s.CastScales) == 0 {
		return nil, nil, nil
	}
	be, f := o.Backend(), o.Config().Recipe.Format
	names := fp8Params(o)
	cands := make([][]float32, len(names))
	masks := make([]byte, len(names))
	slot := make(map[string]int, len(names))
	for i, name := range names {
		slot[name] = i
		v, err := o.Param(name)
		if err != nil {
			return nil, nil, err
		}
		raw := make([]byte, 4)
		if err := be.Read(raw, v.ScaleInv, 0); err != nil {
			return nil, nil, err
		}
		cands[i] = scaleCandidates(s.CastScales[i], collective.FromBytes[float32](raw)[0])
		masks[i] = 1<<len(cands[i]) - 1
	}
	for _, p := range pieces {
		i, ok := slot[p.Param]
		if !ok {
			continue
		}
		v, err := o.Param(p.Param)
		if err != nil {
			return nil, nil, err
		}
		held := make([]byte, len(p.Master))
		if err := be.Read(held, v.Data, p.Offset); err != nil {
			return nil, nil, err
		}
		cast := make([]byte, len(p.Master))
		for k, sc := range cands[i] {
			if masks[i]&(1<<k) == 0 {
				continue
			}
			fp8.CastScaled(cast, p.Master, sc, f)
			if !bytes.Equal(cast, held) {
				masks[i] &^= 1 << k
			}
		}
	}
	return cands, masks, nil
}

// exactCastScales picks, per FP8 parameter, the first candidate that every
// rank's mask keeps; where none does, the reported scale stays (and Load
// will report ErrVerify).
func exactCastScales(reported []float32, cands [][]float32, masks [][]byte) []float32 {
	out := slices.Clone(reported)
	for i := range out {
		all := byte(0xff)
		for _, m := range masks {
			all &= m[i]
		}
		for k := range cands[i] {
			if all&(1<<k) != 0 {
				out[i] = cands[i][k]
				break
			}
		}
	}
	return out
}
