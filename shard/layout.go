package shard

import (
	"errors"
	"fmt"
)

// ErrInvalid marks a parameter list or options that no layout can be made of.
var ErrInvalid = errors.New("shard: invalid layout request")

const (
	// DefaultBucketElements is the target number of elements per bucket.
	DefaultBucketElements = 1 << 26
	// DefaultAlign is the default alignment of FP8 buckets in elements: a
	// multiple of every 1-D block of the FP8 recipes (32 and 128).
	DefaultAlign = 128
	// HighPrecisionAlign is the alignment of high-precision buckets in
	// elements (64 bytes of float32).
	HighPrecisionAlign = 16
	// MaxWorld is the largest data-parallel size a layout is made for.
	MaxWorld = 1 << 16
	// MaxElements bounds the elements of one parameter and of a whole
	// layout (2^46, 70 trillion: hundreds of TiB of optimizer state). Below
	// it, every offset, rounding and byte count of the layout and of the
	// optimizer's buffers fits an int.
	MaxElements = 1 << 46
	// MaxAlign bounds Options.Align and HighPrecisionAlign (2^20 elements,
	// far above any block of a recipe or of FP8 moments). With it a bucket
	// rounds up to at most MaxWorld*MaxAlign = 2^36 elements past
	// MaxElements, so sizes still fit an int.
	MaxAlign = 1 << 20
)

// Param describes one parameter tensor.
type Param struct {
	Name  string
	Shape []int
	// HighPrecision parameters (norms, biases) are gathered in BF16 or FP32
	// instead of FP8.
	HighPrecision bool
}

// NumElements is the product of the shape (1 for a scalar). It does not
// check for overflow: New refuses a shape whose product exceeds
// MaxElements (see Elements).
func (p Param) NumElements() int {
	n := 1
	for _, s := range p.Shape {
		n *= s
	}
	return n
}

// Options tune a layout. The zero value takes the defaults.
type Options struct {
	// BucketElements is the target size of a bucket in elements.
	BucketElements int
	// Align is the alignment of FP8 parameters and shard boundaries in FP8
	// buckets, in elements; it must be a positive multiple of the FP8
	// recipe's 1-D block size, at most MaxAlign.
	Align int
	// HighPrecisionAlign is the alignment of parameters and shard boundaries
	// in high-precision buckets, in elements (0: the constant
	// HighPrecisionAlign), at most MaxAlign. FP8 moments need a multiple of
	// their block.
	HighPrecisionAlign int
}

func (o Options) withDefaults() Options {
	if o.BucketElements == 0 {
		o.BucketElements = DefaultBucketElements
	}
	if o.Align == 0 {
		o.Align = DefaultAlign
	}
	if o.HighPrecisionAlign == 0 {
		o.HighPrecisionAlign = HighPrecisionAlign
	}
	return o
}

// Place is where a parameter lives.
type Place struct {
	Bucket int // index into Layout.Buckets
	Offset int // first element in the bucket
	Len    int // number of elements
}

// Bucket is one flat buffer, reduced, sharded and gathered as a whole.
type Bucket struct {
	HighPrecision bool
	Params        []int // indices into Layout.Params, in order
	Align         int   // alignment of parameter starts and shard boundaries
	Used          int   // elements up to the end of the last parameter
	Size          int   // Used rounded up to a multiple of World*Align
	ShardSize     int   // Size / World
}

// Layout is the flat layout of every buffer of a data-parallel optimizer.
// It is immutable once made.
type Layout struct {
	Params  []Param
	World   int
	Options Options
	Buckets []Bucket
	Places  []Place // one per parameter
}

// New computes the layout of params over world ranks.
func New(params []Param, world int, opts Options) (*Layout, error) {
	opts = opts.withDefaults()
	if world < 1 || world > MaxWorld {
		return nil, fmt.Errorf("shard: world size %d outside [1, %d]: %w", world, MaxWorld, ErrInvalid)
	}
	if opts.BucketElements < 1 {
		return nil, fmt.Errorf("shard: bucket size %d elements: %w", opts.BucketElements, ErrInvalid)
	}
	for _, a := range []struct {
		name string
		v    int
	}{{"Align", opts.Align}, {"HighPrecisionAlign", opts.HighPrecisionAlign}} {
		if a.v < 1 || a.v > MaxAlign {
			return nil, fmt.Errorf("shard: Options.%s is %d elements, want 1 to %d (MaxAlign): %w", a.name, a.v, MaxAlign, ErrInvalid)
		}
	}
	if len(params) == 0 {
		return nil, fmt.Errorf("shard: no parameters: %w", ErrInvalid)
	}
	seen := make(map[string]int, len(params))
	total := 0
	l := &Layout{World: world, Options: opts, Params: make([]Param, len(params)), Places: make([]Place, len(params))}
	for i, p := range params {
		if p.Name == "" {
			return nil, fmt.Errorf("shard: parameter %d has no name: %w", i, ErrInvalid)
		}
		if j, dup := seen[p.Name]; dup {
			return nil, fmt.Errorf("shard: parameters %d and %d are both named %q: %w", j, i, p.Name, ErrInvalid)
		}
		seen[p.Name] = i
		n, err := p.Elements()
		if err != nil {
			return nil, err
		}
		if total += n; total > MaxElements {
			return nil, fmt.Errorf("shard: parameters up to %q hold %d elements, more than %d (MaxElements): %w", p.Name, total, MaxElements, ErrInvalid)
		}
		l.Params[i] = Param{Name: p.Name, Shape: append([]int(nil), p.Shape...), HighPrecision: p.HighPrecision}
	}
	open := [2]int{-1, -1} // the bucket being filled, per kind
	for i, p := range l.Params {
		kind, align := 0, opts.Align
		if p.HighPrecision {
			kind, align = 1, opts.HighPrecisionAlign
		}
		n := p.NumElements()
		b := open[kind]
		if b >= 0 {
			start := roundUp(l.Buckets[b].Used, align)
			if start+n > opts.BucketElements {
				b = -1
			}
		}
		if b < 0 {
			l.Buckets = append(l.Buckets, Bucket{HighPrecision: p.HighPrecision, Align: align})
			b = len(l.Buckets) - 1
			open[kind] = b
		}
		bk := &l.Buckets[b]
		start := roundUp(bk.Used, align)
		bk.Params = append(bk.Params, i)
		bk.Used = start + n
		l.Places[i] = Place{Bucket: b, Offset: start, Len: n}
	}
	for b := range l.Buckets {
		bk := &l.Buckets[b]
		bk.Size = roundUp(bk.Used, world*bk.Align)
		bk.ShardSize = bk.Size / world
	}
	return l, nil
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// Elements is NumElements checked: an error wrapping ErrInvalid when a
// dimension is not positive or the product exceeds MaxElements (an int
// product would overflow: {2^32, 2^32} gives 0, {3037000500, 3037000500} a
// negative number).
func (p Param) Elements() (int, error) {
	n := 1
	for _, s := range p.Shape {
		if s < 1 {
			return 0, fmt.Errorf("shard: parameter %q has shape %v: every dimension must be positive: %w", p.Name, p.Shape, ErrInvalid)
		}
		if n > MaxElements/s {
			return 0, fmt.Errorf("shard: parameter %q has shape %v: more than %d elements (MaxElements): %w", p.Name, p.Shape, MaxElements, ErrInvalid)
		}
		n *= s
	}
	return n, nil
}

// ShardRange returns the elements [lo, hi) of bucket b that rank owns.
func (l *Layout) ShardRange(b, rank int) (lo, hi int) {
	s := l.Buckets[b].ShardSize
	return rank * s, (rank + 1) * s
}

// Piece is the part of one parameter that falls in one rank's shard.
type Piece struct {
	Param        int // index into Layout.Params
	ParamOffset  int // first element of the piece within the parameter
	BucketOffset int // first element of the piece within the bucket
	ShardOffset  int // first element of the piece within the rank's shard
	Len          int // number of elements, at least 1
}

// Pieces returns the pieces of parameters that rank owns in bucket b, in
// bucket order. The slice is freshly allocated.
func (l *Layout) Pieces(b, rank int) []Piece {
	lo, hi := l.ShardRange(b, rank)
	var out []Piece
	for _, i := range l.Buckets[b].Params {
		pl := l.Places[i]
		s, e := max(pl.Offset, lo), min(pl.Offset+pl.Len, hi)
		if s >= e {
			continue
		}
		out = append(out, Piece{Param: i, ParamOffset: s - pl.Offset, BucketOffset: s, ShardOffset: s - lo, Len: e - s})
	}
	return out
}

// TotalElements is the number of parameter elements (no padding).
func (l *Layout) TotalElements() int {
	n := 0
	for _, p := range l.Places {
		n += p.Len
	}
	return n
}

// BufferElements is the number of elements of every bucket, padding included,
// counting only FP8 buckets (highPrecision false) or only high-precision ones.
func (l *Layout) BufferElements(highPrecision bool) int {
	n := 0
	for _, b := range l.Buckets {
		if b.HighPrecision == highPrecision {
			n += b.Size
		}
	}
	return n
}

// Index returns the index of the parameter named name, or -1.
func (l *Layout) Index(name string) int {
	for i, p := range l.Params {
		if p.Name == name {
			return i
		}
	}
	return -1
}
