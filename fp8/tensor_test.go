package fp8

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refGroup returns the scale group of element i under recipe s for a matrix
// with cols columns: 0 per tensor, the block, or the 128x128 tile.
func refGroup(s Scaling, i, cols int) int {
	switch s {
	case Block1x128:
		return i / 128
	case MXFP8:
		return i / 32
	case Block128x128:
		return refTile(i, cols, 128)
	}
	return 0
}

// refQuantize is the whole-tensor reference of Quantize for the stateless
// recipes: it groups the elements by scale group, derives each group's
// scale from the definitions (refScale, refMX) and encodes element by
// element.
func refQuantize(src []float32, cols int, r Recipe) (codes []byte, scaleInv []float32) {
	groups := map[int][]int{}
	ng := 0
	for i := range src {
		g := refGroup(r.Scaling, i, cols)
		groups[g] = append(groups[g], i)
		ng = max(ng, g+1)
	}
	codes = make([]byte, len(src))
	scaleInv = make([]float32, max(ng, 1))
	if len(src) == 0 {
		scaleInv[0] = 1
	}
	for g, idx := range groups {
		run := make([]float32, len(idx))
		for j, i := range idx {
			run[j] = src[i]
		}
		if r.Scaling == MXFP8 {
			e, c := refMX(run, r.Format)
			scaleInv[g] = E8M0Value(e)
			for j, i := range idx {
				codes[i] = c[j]
			}
			continue
		}
		scale, inv := refScale(refAmax(run), r.Format, r.Margin, r.PowerOf2)
		scaleInv[g] = inv
		for _, i := range idx {
			codes[i] = r.Format.Encode(refProduct(src[i], scale))
		}
	}
	return codes, scaleInv
}

func TestQuantize(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	shapes := [][]int{nil, {1}, {0}, {300}, {130, 33}, {2, 3, 200}, {257, 129}, {4, 0}}
	for _, f := range []Format{E4M3, E5M2} {
		for _, s := range []Scaling{TensorCurrent, Block1x128, Block128x128, MXFP8} {
			for _, shape := range shapes {
				rc := Recipe{Format: f, Scaling: s}
				if s != MXFP8 {
					rc.Margin, rc.PowerOf2 = r.IntN(2), r.IntN(2) == 0
				}
				t.Run(fmt.Sprintf("%v/%v", rc, shape), func(t *testing.T) {
					n := numElements(shape)
					_, cols := Matrix(shape)
					src := specialSlice(r, n)
					if n > 40 {
						withSpecialBlocks(src, 32, 0)
					}
					tn, err := Quantize(src, shape, rc, nil)
					if err != nil {
						t.Fatal(err)
					}
					codes, inv := refQuantize(src, cols, rc)
					if string(tn.Data) != string(codes) {
						t.Fatalf("codes differ from the reference")
					}
					if len(tn.ScaleInv) != len(inv) && n > 0 {
						t.Fatalf("%d scales, want %d", len(tn.ScaleInv), len(inv))
					}
					for k := range tn.ScaleInv {
						if math.Float32bits(tn.ScaleInv[k]) != math.Float32bits(inv[k]) && !(inv[k] != inv[k] && tn.ScaleInv[k] != tn.ScaleInv[k]) {
							t.Fatalf("scale_inv[%d] = %g, want %g", k, tn.ScaleInv[k], inv[k])
						}
					}
					if (s == MXFP8) != (tn.ScaleE8M0 != nil) && n > 0 {
						t.Fatalf("ScaleE8M0 = %v for %v", tn.ScaleE8M0, s)
					}
					dst := make([]float32, n)
					if err := tn.Dequantize(dst); err != nil {
						t.Fatal(err)
					}
					for i := range dst {
						want := refProduct(f.Decode(codes[i]), inv[refGroup(s, i, cols)])
						if math.Float32bits(dst[i]) != math.Float32bits(want) && !(want != want && dst[i] != dst[i]) {
							t.Fatalf("Dequantize[%d] = %g, want %g", i, dst[i], want)
						}
					}
				})
			}
		}
	}
}

// TestQuantizeAccuracy checks that a finite Gaussian tensor comes back
// within the format's rounding error: relative error at most 2^-(m+1) for
// every element whose scaled value is normal, whatever the recipe.
func TestQuantizeAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	src := make([]float32, 200*150)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	for _, f := range []Format{E4M3, E5M2} {
		bound := map[Format]float64{E4M3: 0x1p-4, E5M2: 0x1p-3}[f]
		for _, s := range []Scaling{TensorCurrent, Block1x128, Block128x128} {
			rc := Recipe{Format: f, Scaling: s}
			tn, err := Quantize(src, []int{200, 150}, rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]float32, len(src))
			if err := tn.Dequantize(dst); err != nil {
				t.Fatal(err)
			}
			for i, x := range src {
				if math.Abs(float64(x)) < 0.01 {
					continue // may be subnormal after scaling
				}
				if e := math.Abs(float64(dst[i]-x) / float64(x)); e > bound {
					t.Fatalf("%v: element %d = %g came back %g (relative error %g)", rc, i, x, dst[i], e)
				}
			}
		}
	}
}

func TestQuantizeErrors(t *testing.T) {
	ok := Recipe{Format: E4M3, Scaling: TensorCurrent}
	for _, c := range []struct {
		name  string
		src   []float32
		shape []int
		r     Recipe
		h     *AmaxHistory
		want  error
	}{
		{"bad recipe", []float32{1}, []int{1}, Recipe{}, nil, ErrRecipe},
		{"shape mismatch", []float32{1, 2}, []int{3}, ok, nil, ErrShape},
		{"negative dimension", []float32{}, []int{-1, 0}, ok, nil, ErrShape},
		{"delayed without history", []float32{1}, []int{1}, Recipe{Format: E4M3, Scaling: TensorDelayed}, nil, ErrHistory},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Quantize(c.src, c.shape, c.r, c.h); !errors.Is(err, c.want) {
				t.Errorf("Quantize = %v, want %v", err, c.want)
			}
		})
	}
	tn, err := Quantize([]float32{1, 2, 3}, []int{3}, Recipe{Format: E5M2, Scaling: Block1x128}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.Dequantize(make([]float32, 2)); !errors.Is(err, ErrShape) {
		t.Errorf("Dequantize into a short dst = %v, want ErrShape", err)
	}
	tn.ScaleInv = nil
	if err := tn.Dequantize(make([]float32, 3)); !errors.Is(err, ErrShape) {
		t.Errorf("Dequantize without scales = %v, want ErrShape", err)
	}
}
