package shard

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
)

// TestAlignBounds: an alignment past MaxAlign (or not positive) is an
// error naming the option and the bound, never a panic; at MaxAlign, with
// MaxWorld ranks and a parameter near MaxElements, the bucket's size is
// the exact round-up computed with math/big. Before, Align 1<<62 on 4
// ranks divided by zero and MaxInt sliced out of bounds.
func TestAlignBounds(t *testing.T) {
	p := []Param{{Name: "w", Shape: []int{1000}}, {Name: "b", Shape: []int{10}, HighPrecision: true}}
	bad := []struct {
		opts  Options
		world int
		field string
	}{
		{Options{Align: 1 << 62}, 4, "Align"},
		{Options{Align: math.MaxInt}, 1, "Align"},
		{Options{Align: MaxAlign + 1}, 1, "Align"},
		{Options{Align: -128}, 1, "Align"},
		{Options{HighPrecisionAlign: 1 << 62}, 4, "HighPrecisionAlign"},
		{Options{HighPrecisionAlign: math.MaxInt}, 2, "HighPrecisionAlign"},
	}
	for _, c := range bad {
		t.Run(fmt.Sprintf("%+v on %d", c.opts, c.world), func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panic: %v", r)
					}
				}()
				_, err = New(p, c.world, c.opts)
			}()
			want := fmt.Sprintf("Options.%s is %d elements, want 1 to %d (MaxAlign)", c.field, c.opts.Align+c.opts.HighPrecisionAlign, MaxAlign)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Fatalf("%v, want ErrInvalid saying %q", err, want)
			}
		})
	}
	t.Run("at the bounds", func(t *testing.T) {
		big1 := []Param{{Name: "w", Shape: []int{MaxElements - 7}}, {Name: "b", Shape: []int{7}, HighPrecision: true}}
		l, err := New(big1, MaxWorld, Options{Align: MaxAlign, HighPrecisionAlign: MaxAlign, BucketElements: MaxElements})
		if err != nil {
			t.Fatal(err)
		}
		for b, bk := range l.Buckets {
			unit := new(big.Int).Mul(big.NewInt(MaxWorld), big.NewInt(MaxAlign))
			want := new(big.Int).Add(big.NewInt(int64(bk.Used)), new(big.Int).Sub(unit, big.NewInt(1)))
			want.Div(want, unit).Mul(want, unit)
			if !want.IsInt64() || want.Int64() != int64(bk.Size) || bk.ShardSize*MaxWorld != bk.Size {
				t.Fatalf("bucket %d: used %d, size %d, shard %d; want size %s", b, bk.Used, bk.Size, bk.ShardSize, want)
			}
		}
	})
}
