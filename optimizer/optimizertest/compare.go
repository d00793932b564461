package optimizertest

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/distopt/distopt/fp8"
)

// FirstDiff returns the first index at which the bits of a and b differ
// (so NaNs compare by payload and +0 differs from -0), 0 when their lengths
// differ, and -1 when they are bit-identical.
func FirstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// SameTensor reports whether a and b hold the same FP8 bytes, the same
// scale_inv bits and E8M0 scales, the same shape (a nil shape equals an
// empty one, as encoding/gob does not tell them apart), format and recipe.
// Two nil tensors are the same; a nil and a non-nil one are not.
func SameTensor(a, b *fp8.Tensor) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.Data, b.Data) && FirstDiff(a.ScaleInv, b.ScaleInv) < 0 && bytes.Equal(a.ScaleE8M0, b.ScaleE8M0) &&
		slices.Equal(a.Shape, b.Shape) && a.Format == b.Format && a.Recipe == b.Recipe
}

// Diff describes every way got's state differs bit for bit from want's,
// and returns nil when it does not. want may come from a run with another
// world size than got's (typically one rank): its pieces are assembled by
// offset into whole parameters, and each of got's pieces is compared with
// the part of them it covers, its master and moment m, and moment v where
// want has one (where want has none, got must have none either). Every FP8
// tensor (SameTensor) and every high-precision weight of want must be in
// got, the same. Step results are not compared. A description names the
// parameter and the first index that differs, within the parameter.
func Diff(want, got Result) []string {
	type whole struct{ master, m, v []float32 }
	full := map[string]*whole{}
	for _, ps := range want.Pieces {
		w := full[ps.Param]
		if w == nil {
			w = &whole{}
			full[ps.Param] = w
		}
		for _, f := range []struct {
			dst *[]float32
			src []float32
		}{{&w.master, ps.Master}, {&w.m, ps.M}, {&w.v, ps.V}} {
			if f.src == nil {
				continue
			}
			if n := ps.Offset + len(f.src); len(*f.dst) < n {
				*f.dst = append(*f.dst, make([]float32, n-len(*f.dst))...)
			}
			copy((*f.dst)[ps.Offset:], f.src)
		}
	}
	var diffs []string
	for _, ps := range got.Pieces {
		w := full[ps.Param]
		if w == nil {
			diffs = append(diffs, fmt.Sprintf("piece of %s at %d is not in the reference", ps.Param, ps.Offset))
			continue
		}
		n := len(ps.Master)
		for _, f := range []struct {
			what      string
			got, want []float32
		}{{"master", ps.Master, w.master}, {"moment m", ps.M, w.m}, {"moment v", ps.V, w.v}} {
			if f.want == nil {
				if f.got != nil {
					diffs = append(diffs, fmt.Sprintf("%s of %s at %d, absent from the reference", f.what, ps.Param, ps.Offset))
				}
				continue
			}
			if ps.Offset+n > len(f.want) {
				diffs = append(diffs, fmt.Sprintf("%s of %s at %d: %d elements past the reference's %d", f.what, ps.Param, ps.Offset, n, len(f.want)))
				continue
			}
			if i := FirstDiff(f.got, f.want[ps.Offset:ps.Offset+n]); i >= 0 {
				diffs = append(diffs, fmt.Sprintf("%s of %s differs at %d", f.what, ps.Param, ps.Offset+i))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want.Tensors)) {
		if !SameTensor(got.Tensors[name], want.Tensors[name]) {
			diffs = append(diffs, fmt.Sprintf("FP8 bytes or scales of %s differ from the reference", name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want.Weights)) {
		if i := FirstDiff(got.Weights[name], want.Weights[name]); i >= 0 {
			diffs = append(diffs, fmt.Sprintf("gathered %s differs at %d", name, i))
		}
	}
	return diffs
}
