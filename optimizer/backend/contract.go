package backend

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
)

// Hyper holds the per-step scalars of the update rules, identical on every
// rank and computed on the host.
type Hyper struct {
	GradScale                    float32 // clip coefficient / loss scale
	Beta1, Beta2                 float32
	OneMinusBeta1, OneMinusBeta2 float32
	Eps                          float32
	SqrtVCorrection              float32 // 1/sqrt(1 - beta2^t): the bias correction of sqrt(v)
	Momentum                     float32 // SGD
}

// Mode says what happens to a segment after its
// update.
type Mode uint8

const (
	// ModeHighPrecision writes the new master to UpdateArgs.HP as HPType
	// (bfloat16 with round-to-nearest-even, or float32).
	ModeHighPrecision Mode = iota + 1
	// ModeTensorCurrent folds the amax of the new master into Amax[Slot];
	// the cast follows in Cast with Scale[Slot].
	ModeTensorCurrent
	// ModeTensorDelayed casts the new master with Scale[Slot] into FP8 and
	// folds its amax into Amax[Slot], in the same pass.
	ModeTensorDelayed
	// ModeBlock casts each 1-D block of Block elements of the new master
	// with the scale of its own amax (fp8.CastBlocks1D; fp8.CastMX when MX)
	// and writes the block's scale_inv (float32) or E8M0 byte into
	// BlockScales at index (segment start + k*Block)/Block. Segments of this
	// mode start at a multiple of Block (the layout's alignment guarantees
	// it); their last block may be partial.
	ModeBlock
	// ModeTile folds the amax of each 128x128 tile of the new master into
	// Amax[Slot + tile], tiles numbered as fp8.TileAmax does for a matrix
	// of Cols columns whose element ParamOffset is the segment's first.
	ModeTile
)

// Segment is a run of a shard that belongs to one
// parameter: one row of the segment table of UpdateArgs and CastArgs.
// Its Factors change from one step to the next; the rest is fixed for a
// run (see UpdatePlanner).
type Segment struct {
	Off, Len int  // elements within the shard
	Mode     Mode // what follows the update
	Factors       // the rule's factors of this step (Rule.Factors)
	Slot     int  // amax and scale slot (tensor modes) or first tile slot
	// ParamOffset and Cols place the segment in its matrix (ModeTile).
	ParamOffset, Cols int
}

// Factors are a segment's per-step factors, which the rule derives from
// its parameter's learning rate and weight decay (Rule.Factors).
type Factors struct {
	// StepSize is the rule's step size: lr/(1 - beta1^t) for AdamW, lr for
	// SGD (see AdamWElem and SGDElem).
	StepSize float32
	// Shrink is AdamW's decoupled weight decay as a factor of the master,
	// 1 - lr*wd (1 without decay).
	Shrink float32
	// WeightDecay is SGD's coupled weight decay coefficient wd (0 without
	// decay), added to the gradient as wd*p.
	WeightDecay float32
}

// UpdateArgs is one bucket shard's update. Buffers are the backend's own;
// element offsets count from the start of each buffer.
type UpdateArgs struct {
	Rule  Rule
	Hyper Hyper
	// Control, when set, is the step control block (Control's layout):
	// the update takes its GradScale instead of Hyper.GradScale, and
	// writes nothing (masters, moments, outputs, amaxes) when its Skip is
	// set.
	Control    buffer.Buffer
	N          int           // elements in the shard
	Master     buffer.Buffer // float32 x N
	M, V       buffer.Buffer // moments (V unused for SGD; both unused for RuleNone)
	MomentType buffer.DType  // Float32 or BFloat16
	// MType and VType, when set, are the storage of M and V one by one
	// (MomentDefault: MomentType). An FP8 moment holds N bytes of E4M3
	// codes, with the float32 scale_inv of each block of MomentBlock
	// elements (block k: elements [k*MomentBlock, (k+1)*MomentBlock)) in
	// MScales or VScales (EncodeMomentBlock; segments start at a multiple
	// of MomentBlock).
	MType, VType MomentDType
	MomentBlock  int
	// MomentSeed and MomentBase drive the stochastic rounding of FP8
	// second moments: shard element i is at MomentBase+i in its bucket
	// (EncodeMomentBlock's pos). MomentBase is even (a multiple of the
	// block in the optimizer): the CUDA kernels draw the random bits of
	// two neighbours, 2j and 2j+1, from one hash (DitherBits).
	MomentSeed       uint32
	MomentBase       int
	MScales, VScales buffer.Buffer
	Grad             buffer.Buffer // the reduced gradient shard, GradType x N
	GradType         buffer.DType  // Float32 or BFloat16
	Segments         []Segment

	// FP8 outputs (FP8 buckets).
	Recipe      fp8.Recipe
	FP8         buffer.Buffer // byte x N: this rank's slice of the FP8 bucket
	BlockScales buffer.Buffer // ModeBlock: float32 or byte per block of the shard
	Amax        buffer.Buffer // uint32 amax keys (AbsBits), one per slot
	Scale       buffer.Buffer // float32 scales, one per slot (ModeTensorDelayed)

	// High-precision outputs (high-precision buckets).
	HP     buffer.Buffer // HPType x N: this rank's slice of the bucket
	HPType buffer.DType  // BFloat16 or Float32
}

// CastArgs casts the segments of modes ModeTensorCurrent and ModeTile:
// FP8[i] = Encode(float32(Master[i] * Scale[slot of i])); other segments are
// left alone.
type CastArgs struct {
	N        int
	Master   buffer.Buffer
	Segments []Segment
	Format   fp8.Format
	FP8      buffer.Buffer
	Scale    buffer.Buffer // float32 per slot
	// Control, when set, is the step control block: nothing is written
	// when its Skip is set.
	Control buffer.Buffer
}

// StepValues are what a planned update (UpdatePlan) takes at each step:
// everything else of its arguments is fixed when the plan is made.
type StepValues struct {
	Hyper Hyper
	// Factors[i][j] are the factors of segment j of shard i.
	Factors [][]Factors
	// Seeds[i] is the MomentSeed of shard i.
	Seeds []uint32
}
