package optimizer

import (
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
)

// Backend is where a rank's buffers live and its arithmetic runs. The CPU
// backend (NewCPU) is the reference; every other backend must produce the
// same bytes for the same arguments.
//
// Buffers returned by Alloc belong to the backend that made them and are of
// its Memory kind, so they can be handed to a communicator of that kind.
// Methods may run asynchronously on the backend's own stream; Read and Sync
// wait for everything issued before them.
type Backend interface {
	// Name says what runs the step, e.g. "cpu (8 goroutines)" or "cuda:0 NVIDIA H200 (sm_90)".
	Name() string
	// Memory is the kind of the buffers the backend allocates.
	Memory() collective.MemoryKind
	// Alloc returns n zeroed bytes.
	Alloc(n int) (collective.Buffer, error)
	// Free releases a buffer from Alloc.
	Free(b collective.Buffer)
	// Write copies src into dst at byte offset off.
	Write(dst collective.Buffer, off int, src []byte) error
	// Read copies len(dst) bytes of src at byte offset off into dst.
	Read(dst []byte, src collective.Buffer, off int) error
	// Zero sets bytes [off, off+n) of b to zero.
	Zero(b collective.Buffer, off, n int) error
	// Sync waits for all work issued so far.
	Sync() error

	// GradStats adds to stats (StatsLen int64 values, normalised as by
	// Normalize) the exact sum of squares and the non-finite count of the
	// first n elements of grad, as AddSquare defines.
	GradStats(stats, grad collective.Buffer, gt collective.DType, n int) error
	// Update runs one bucket shard's update (see UpdateArgs).
	Update(a *UpdateArgs) error
	// Cast casts the segments of mode TensorCurrent and Tile with the scales
	// derived from the reduced amax (see CastArgs).
	Cast(a *CastArgs) error
	// Close releases everything the backend holds.
	Close() error
}

// Rule is the update rule of a step.
type Rule uint8

const (
	// RuleNone leaves master and moments unchanged (the initial cast, and the
	// cast after a checkpoint load).
	RuleNone Rule = iota
	// RuleAdamW is AdamWElem.
	RuleAdamW
	// RuleSGD is SGDElem.
	RuleSGD
)

// Hyper (for backend authors) holds the per-step scalars of the update rules, identical on every
// rank and computed on the host.
type Hyper struct {
	GradScale                    float32 // clip coefficient / loss scale
	Beta1, Beta2                 float32
	OneMinusBeta1, OneMinusBeta2 float32
	Eps                          float32
	RBC2                         float32 // 1/sqrt(1 - beta2^t)
	Momentum                     float32 // SGD
}

// Mode (for backend authors) says what happens to a segment after its
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

// Segment (for backend authors) is a run of a shard that belongs to one
// parameter: one row of the segment table of UpdateArgs and CastArgs.
type Segment struct {
	Off, Len int  // elements within the shard
	Mode     Mode // what follows the update
	// StepSize is the rule's step size: lr/(1 - beta1^t) for AdamW, lr for
	// SGD (see AdamWElem and SGDElem).
	StepSize float32
	// Shrink is AdamW's decoupled weight decay as a factor of the master,
	// 1 - lr*wd (1 without decay).
	Shrink float32
	// WeightDecay is SGD's coupled weight decay coefficient wd (0 without
	// decay), added to the gradient as wd*p.
	WeightDecay float32
	Slot        int // amax and scale slot (tensor modes) or first tile slot
	// ParamOffset and Cols place the segment in its matrix (ModeTile).
	ParamOffset, Cols int
}

// UpdateArgs (for backend authors) is one bucket shard's update. Buffers are the backend's own;
// element offsets count from the start of each buffer.
type UpdateArgs struct {
	Rule       Rule
	Hyper      Hyper
	N          int               // elements in the shard
	Master     collective.Buffer // float32 x N
	M, V       collective.Buffer // moments (V unused for SGD; both unused for RuleNone)
	MomentType collective.DType  // Float32 or BFloat16
	Grad       collective.Buffer // the reduced gradient shard, GradType x N
	GradType   collective.DType  // Float32 or BFloat16
	Segments   []Segment

	// FP8 outputs (FP8 buckets).
	Recipe      fp8.Recipe
	FP8         collective.Buffer // byte x N: this rank's slice of the FP8 bucket
	BlockScales collective.Buffer // ModeBlock: float32 or byte per block of the shard
	Amax        collective.Buffer // uint32 amax keys (AbsBits), one per slot
	Scale       collective.Buffer // float32 scales, one per slot (ModeTensorDelayed)

	// High-precision outputs (high-precision buckets).
	HP     collective.Buffer // HPType x N: this rank's slice of the bucket
	HPType collective.DType  // BFloat16 or Float32
}

// CastArgs (for backend authors) casts the segments of modes ModeTensorCurrent and ModeTile:
// FP8[i] = Encode(float32(Master[i] * Scale[slot of i])); other segments are
// left alone.
type CastArgs struct {
	N        int
	Master   collective.Buffer
	Segments []Segment
	Format   fp8.Format
	FP8      collective.Buffer
	Scale    collective.Buffer // float32 per slot
}
