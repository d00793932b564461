package optimizer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/shard"
)

// MomentDType is the storage of one moment (Config.FirstMomentType,
// SecondMomentType); see package optimizer/backend.
type MomentDType = backend.MomentDType

// The moment storage types.
const (
	// MomentDefault is float32.
	MomentDefault = backend.MomentDefault
	// MomentFloat32 stores float32.
	MomentFloat32 = backend.MomentFloat32
	// MomentBFloat16 stores bfloat16.
	MomentBFloat16 = backend.MomentBFloat16
	// MomentFP8 stores E4M3 with a float32 scale per block
	// (backend.EncodeMomentBlock).
	MomentFP8 = backend.MomentFP8
)

// MomentOf returns the MomentDType of a float32 or bfloat16 DType.
func MomentOf(dt buffer.DType) MomentDType { return backend.MomentOf(dt) }

// ParseMomentDType parses a moment type: "float32" ("fp32"), "bfloat16"
// ("bf16") or "fp8".
func ParseMomentDType(s string) (MomentDType, error) {
	t, err := backend.ParseMomentDType(s)
	if err != nil {
		return 0, fmt.Errorf("optimizer: moment type %q: want float32 (fp32), bfloat16 (bf16) or fp8", s)
	}
	return t, nil
}

// ParseMomentTypes parses the moment types of a command line: one type
// for every moment ("fp32", "bf16", "fp8"), or "M,V" one by one (e.g.
// "fp8,bf16"). second is MomentDefault when s names one type and rule has
// a single moment.
func ParseMomentTypes(s string, rule Rule) (first, second MomentDType, err error) {
	m, v, two := strings.Cut(s, ",")
	if first, err = ParseMomentDType(m); err != nil {
		return 0, 0, err
	}
	if !two {
		if rule == RuleSGD {
			return first, MomentDefault, nil
		}
		v = m
	}
	if second, err = ParseMomentDType(v); err != nil {
		return 0, 0, err
	}
	return first, second, nil
}

// momentDefaults resolves the per-moment types and the FP8 block.
func (c *Config) momentDefaults() {
	if c.FirstMomentType == MomentDefault {
		c.FirstMomentType = MomentFloat32
	}
	if c.SecondMomentType == MomentDefault && len(c.Rule.Moments()) > 1 {
		c.SecondMomentType = MomentFloat32
	}
	if c.MomentBlock == 0 {
		c.MomentBlock = backend.DefaultMomentBlock
	}
	if c.hasFP8Moments() && c.Layout.HighPrecisionAlign == 0 {
		c.Layout.HighPrecisionAlign = max(shard.HighPrecisionAlign, c.MomentBlock)
	}
}

// momentTypes returns the storage of each of the rule's moments, in the
// order of Rule.Moments.
func (c *Config) momentTypes() []MomentDType {
	return []MomentDType{c.FirstMomentType, c.SecondMomentType}[:len(c.Rule.Moments())]
}

// hasFP8Moments reports whether a moment of the rule is stored in FP8.
func (c *Config) hasFP8Moments() bool {
	return slices.Contains(c.momentTypes(), MomentFP8)
}

// checkMoments refuses moment types the rule does not have or the layout
// cannot hold.
func (c *Config) checkMoments() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("optimizer: %s: %w", fmt.Sprintf(format, args...), ErrConfig)
	}
	names := c.Rule.Moments()
	if len(names) < 2 && c.SecondMomentType != MomentDefault {
		return bad("rule %s has no second moment, but SecondMomentType is %s", c.Rule, c.SecondMomentType)
	}
	for i, t := range c.momentTypes() {
		if t < MomentFloat32 || t > MomentFP8 {
			return bad("moment %s: unknown type %s", names[i], t)
		}
	}
	if !c.hasFP8Moments() {
		return nil
	}
	if !slices.Contains(backend.MomentBlocks, c.MomentBlock) {
		return bad("FP8 moment block %d: must be one of %v", c.MomentBlock, backend.MomentBlocks)
	}
	align, hpAlign := c.Layout.Align, c.Layout.HighPrecisionAlign
	if align == 0 {
		align = shard.DefaultAlign
	}
	if align%c.MomentBlock != 0 || hpAlign%c.MomentBlock != 0 {
		return bad("FP8 moment block %d does not divide the layout alignment (%d, high-precision %d): blocks would straddle parameters or shards", c.MomentBlock, align, hpAlign)
	}
	return nil
}

// uniformMomentType is bfloat16 when every moment is stored as bfloat16,
// else float32: the moment type of the fingerprint and of the backend's
// UpdateArgs.MomentType.
func (c *Config) uniformMomentType() buffer.DType {
	for _, t := range c.momentTypes() {
		if t != MomentBFloat16 {
			return buffer.Float32
		}
	}
	return buffer.BFloat16
}

// momentFields are the moment settings ranks must share, beyond the
// uniform moment type: none when every moment has it (so fingerprints of
// such configurations are unchanged).
func (c *Config) momentFields() []shard.Field {
	def := backend.MomentOf(c.uniformMomentType())
	for _, t := range c.momentTypes() {
		if t != def {
			return []shard.Field{{Name: "moment types", Value: fmt.Sprint(c.momentTypes(), " block ", c.MomentBlock)}}
		}
	}
	return nil
}

// momentArgs sets the moment storage of u, the update of bucket bk: the
// type of each moment and, for FP8 ones, the codes and the block scales
// that follow them in the same buffer.
func (o *Optimizer) momentArgs(u *backend.UpdateArgs, bk *bucket) {
	ts := o.cfg.momentTypes()
	u.MType = ts[0]
	if len(ts) > 1 {
		u.VType = ts[1]
	}
	u.MomentBlock = o.cfg.MomentBlock
	u.MomentBase = bk.lo // the seed changes every step: updateArgs, stepValues
	n := bk.b.ShardSize
	if u.MType == MomentFP8 {
		u.M, u.MScales = bk.m.Slice(0, n), bk.m.Slice(n, bk.m.Len())
	}
	if u.VType == MomentFP8 {
		u.V, u.VScales = bk.v.Slice(0, n), bk.v.Slice(n, bk.v.Len())
	}
}

// readMoment reads moment i (0: m, 1: v) of piece pc of bucket bk, widened
// to float32 (FP8: backend.DecodeMoment, exact).
func (o *Optimizer) readMoment(bk *bucket, i int, pc shard.Piece) ([]float32, error) {
	buf := []buffer.Buffer{bk.m, bk.v}[i]
	t := o.cfg.momentTypes()[i]
	if t != MomentFP8 {
		dt := momentElem(t)
		return o.readElems(buf, pc.ShardOffset*dt.Size()/4, pc.Len, dt)
	}
	b, n := o.cfg.MomentBlock, bk.b.ShardSize
	codes := make([]byte, pc.Len)
	scales := make([]byte, t.ScaleBytes(pc.Len, b))
	if err := o.backend.Read(codes, buf, pc.ShardOffset); err != nil {
		return nil, err
	}
	if err := o.backend.Read(scales, buf, n+4*(pc.ShardOffset/b)); err != nil {
		return nil, err
	}
	inv := bytesFloat32(scales)
	out := make([]float32, pc.Len)
	for k, c := range codes {
		out[k] = backend.DecodeMoment(c, inv[k/b], i == 1)
	}
	return out, nil
}

// writeMoment stores x as moment i of piece pc of bucket bk (FP8:
// backend.EncodeMomentBlock per block; pieces start at a block boundary, and
// the values ReadPieces returns are encoded back to themselves).
func (o *Optimizer) writeMoment(bk *bucket, i int, pc shard.Piece, x []float32) error {
	buf := []buffer.Buffer{bk.m, bk.v}[i]
	t := o.cfg.momentTypes()[i]
	if t != MomentFP8 {
		dt := momentElem(t)
		return o.backend.Write(buf, dt.Size()*pc.ShardOffset, encodeElems(x, dt))
	}
	b, n := o.cfg.MomentBlock, bk.b.ShardSize
	codes := make([]byte, len(x))
	inv := make([]float32, (len(x)+b-1)/b)
	for k := range inv {
		lo := k * b
		hi := min(lo+b, len(x))
		// exact values (ReadPieces') round to themselves: any seed will do
		inv[k] = backend.EncodeMomentBlock(codes[lo:hi], x[lo:hi], i == 1, 0, uint64(bk.lo+pc.ShardOffset+lo))
	}
	if err := o.backend.Write(buf, pc.ShardOffset, codes); err != nil {
		return err
	}
	return o.backend.Write(buf, n+4*(pc.ShardOffset/b), float32Bytes(inv))
}

// momentElem is the element type of a moment stored unquantized: float32,
// or bfloat16 for MomentBFloat16 (the inverse of backend.MomentOf).
func momentElem(t MomentDType) buffer.DType {
	if t == MomentBFloat16 {
		return buffer.BFloat16
	}
	return buffer.Float32
}
