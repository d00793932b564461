package kernels

import (
	"fmt"
	"math"
	"slices"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
)

// Rule is the update rule of Update.
type Rule uint8

// Rules, the values of backend.Rule.
const (
	RuleNone Rule = iota
	RuleAdamW
	RuleSGD
)

// Hyper is optimizer.Hyper: the per-step scalars of the rules, fields in
// the order of update.cu's struct Hyper (optimizer/gpu's tests check it).
type Hyper struct {
	GradScale, Beta1, Beta2, OneMinusBeta1, OneMinusBeta2, Eps, SqrtVCorrection, Momentum float32
}

// Floats returns the fields of h in order, as the kernels take them.
func (h *Hyper) Floats() [8]float32 {
	return [8]float32{h.GradScale, h.Beta1, h.Beta2, h.OneMinusBeta1, h.OneMinusBeta2, h.Eps, h.SqrtVCorrection, h.Momentum}
}

// UpdateLaunch is one fused update (see update.cu): the rule over every
// segment of Table (uploaded at TablePtr) and, in the same pass, what each
// segment's mode does with the new master. Buffers hold the shard's N
// elements from their first byte; pointers a launch does not use may be 0.
// A table over several shards (PackShards) carries each shard's buffers
// (Master, M, V, Grad, FP8 or HP, BlockScales, MScales, VScales),
// MomentBase and MomentSeed: the launch's own are then not read.
type UpdateLaunch struct {
	Rule                 Rule
	Hyper                Hyper
	MomentBF16, GradBF16 bool // element types of M, V and Grad (else float32)
	Master, M, V, Grad   cuda.DevicePtr
	Table                Table
	TablePtr             cuda.DevicePtr
	Format               fp8.Format // of FP8 (E4M3 when the shard has none)
	FP8                  cuda.DevicePtr
	BlockScales          cuda.DevicePtr // float32 scale_inv (1x128) or E8M0 bytes (MX)
	MX                   bool           // ModeBlock segments are MXFP8 (else 1x128)
	Margin               int
	PowerOf2             bool
	Amax                 cuda.DevicePtr // uint32 keys per slot
	Scale                cuda.DevicePtr // float32 per slot (ModeTensorDelayed)
	HP                   cuda.DevicePtr
	HPBF16               bool // HP holds bfloat16 (else float32)

	// PerMoment picks the _q kernels: M and V stored as MType and VType
	// one by one (MomentBF16 ignored), FP8 ones with their block scales
	// (moments.cuh; optimizer/backend.EncodeMomentBlock).
	PerMoment        bool
	MType, VType     MomentType
	MScales, VScales cuda.DevicePtr // float32 scale_inv per block (FP8)
	MomentBlock      int            // 32, 64 or 128 (FP8)
	MomentSeed       uint32
	MomentBase       uint64 // bucket position of shard element 0

	// Control is the step control block (StepControl), or 0: when set, the
	// kernel takes its gradient scale instead of Hyper.GradScale and writes
	// nothing when its skip flag is set.
	Control cuda.DevicePtr
}

// MomentType is the storage of one moment of a PerMoment launch
// (moments.cuh's enum MomentType).
type MomentType uint8

// Moment storage types.
const (
	MomentF32 MomentType = iota
	MomentBF16
	MomentFP8
)

// momentFlags packs the mtypes parameter of the kernels: M's type in bits
// 0-3, V's in bits 4-7, bit 8 for a bfloat16 gradient.
func (a *UpdateLaunch) momentFlags() uint32 {
	return uint32(a.MType) | uint32(a.VType)<<4 | uint32(b2u(a.GradBF16))<<8
}

func typeName(bf16 bool) string {
	if bf16 {
		return "bf16"
	}
	return "f32"
}

func formatName(f fp8.Format) string {
	if f == fp8.E5M2 {
		return "e5m2"
	}
	return "e4m3"
}

// fixedMoments names the moment types of a PerMoment launch that have
// kernels of their own (update.cu: bodies compiled for those types, with
// the registers they need alone): "_fp8_fp8" (SGD: "_fp8") and
// "_fp8_bf16"; "" for the kernels that read the types at run time.
func (a *UpdateLaunch) fixedMoments() string {
	switch {
	case a.MType == MomentFP8 && a.Rule == RuleSGD:
		return "_fp8"
	case a.MType == MomentFP8 && a.VType == MomentFP8:
		return "_fp8_fp8"
	case a.MType == MomentFP8 && a.VType == MomentBF16:
		return "_fp8_bf16"
	}
	return ""
}

// updateKernel returns the name of the kernel of a launch: the _tiles
// variant when the table has ModeTile segments (only it handles them; the
// others are built without that code). A PerMoment SGD launch whose
// momentum is not FP8 takes the kernel of that one moment type.
func (a *UpdateLaunch) updateKernel() string {
	suffix := ""
	if a.Table.Tiles {
		suffix = "_tiles"
	}
	switch a.Rule {
	case RuleNone:
		return "update_none_" + formatName(a.Format) + suffix
	case RuleAdamW, RuleSGD:
		r := map[Rule]string{RuleAdamW: "adamw", RuleSGD: "sgd"}[a.Rule]
		mbf16 := a.MomentBF16
		if a.PerMoment {
			if a.Rule == RuleAdamW || a.MType == MomentFP8 {
				return fmt.Sprintf("update_%s_q%s_%s%s", r, a.fixedMoments(), formatName(a.Format), suffix)
			}
			// SGD's one moment in float32 or bfloat16: the kernels of
			// one moment type do the same (update.cu builds no other).
			mbf16 = a.MType == MomentBF16
		}
		return fmt.Sprintf("update_%s_m%s_g%s_%s%s", r, typeName(mbf16), typeName(a.GradBF16), formatName(a.Format), suffix)
	}
	panic(fmt.Sprintf("kernels: update rule %d", a.Rule))
}

// Update queues the fused update a on s. It does nothing when the table
// has no chunk. The arithmetic is backend.AdamWElem / SGDElem; the modes
// follow cpu.Backend's Update bit for bit (NaN payloads aside: the GPU
// returns its canonical NaN where the CPU may keep an input's payload).
func (k *Set) Update(s *cuda.Stream, a *UpdateLaunch) error {
	if a.Table.Chunks == 0 {
		return nil
	}
	if a.PerMoment && (a.MType == MomentFP8 || a.VType == MomentFP8) && !slices.Contains([]int{32, 64, 128}, a.MomentBlock) {
		return fmt.Errorf("kernels: FP8 moments in blocks of %d elements (32, 64 or 128)", a.MomentBlock)
	}
	if a.PerMoment && a.Rule == RuleAdamW && a.VType == MomentFP8 {
		if err := a.checkMomentBases(); err != nil {
			return err
		}
	}
	f := a.Format
	if !f.Valid() {
		f = fp8.E4M3
	}
	b := a.Table.Chunks
	args := new(cuda.Args).Ptr(a.Master).Ptr(a.M).Ptr(a.V).Ptr(a.Grad).Ptr(a.TablePtr).
		U32(uint32(a.Table.Segs)).U64(uint64(a.Table.Chunks))
	for _, x := range a.Hyper.Floats() {
		args.F32(x)
	}
	args.Ptr(a.FP8).Ptr(a.BlockScales).Ptr(a.Amax).Ptr(a.Scale).Ptr(a.HP).U32(b2u(a.HPBF16)).U32(b2u(a.MX)).
		F32(f.Max()).F32(float32(math.Ldexp(1, -a.Margin))).U32(b2u(a.PowerOf2)).
		Ptr(a.MScales).Ptr(a.VScales).U32(a.momentFlags()).U32(uint32(a.MomentBlock)).U32(a.MomentSeed).U64(a.MomentBase).
		Ptr(a.Control).Ptr(a.Table.shardsPtr(a.TablePtr))
	a2 := *a
	a2.Format = f
	return s.Launch(k.function(a2.updateKernel()), cuda.Dim3{X: uint32(min(b, maxChunkBlocks))}, cuda.Dim3{X: blockSize}, 0, args)
}

// checkMomentBases checks that the bucket position of every shard's
// element 0 is a multiple of 4 (the kernels hash 4 elements at once): the
// launch's MomentBase, or each shard's in a table over several.
func (a *UpdateLaunch) checkMomentBases() error {
	bases := []uint64{a.MomentBase}
	if a.Table.Shards > 0 {
		bases = a.Table.momentBases()
	}
	for _, b := range bases {
		if b%4 != 0 {
			return fmt.Errorf("kernels: FP8 second moments from bucket position %d: MomentBase must be a multiple of 4 (the kernels hash 4 elements at once)", b)
		}
	}
	return nil
}

// maxChunkBlocks bounds the grid of the chunked kernels (they loop over
// chunks beyond it).
const maxChunkBlocks = 1 << 20

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// CastSegments queues on s the cast of the segments of table (uploaded at
// tablePtr), which must all be of ModeTensorCurrent or ModeTile:
// dst[i] = f.Encode(float32(master[i] * scale[slot])), the slot of a tile
// segment being Slot + fp8.TileIndex(ParamOffset + i - Off, Cols, 128);
// nothing when ctl (a step control block, or 0) has its skip flag set. A
// table over several shards (PackShards) carries each shard's master and
// FP8 bytes (Shard.Out): dst and master are then not read.
func (k *Set) CastSegments(s *cuda.Stream, dst, master cuda.DevicePtr, table Table, tablePtr cuda.DevicePtr, scale cuda.DevicePtr, f fp8.Format, ctl cuda.DevicePtr) error {
	if table.Chunks == 0 {
		return nil
	}
	args := new(cuda.Args).Ptr(dst).Ptr(master).Ptr(tablePtr).U32(uint32(table.Segs)).U64(uint64(table.Chunks)).Ptr(scale).Ptr(ctl).
		Ptr(table.shardsPtr(tablePtr))
	return s.Launch(k.function("segcast_"+formatName(f)), cuda.Dim3{X: uint32(min(table.Chunks, maxChunkBlocks))}, cuda.Dim3{X: blockSize}, 0, args)
}
