package nccl

import "fmt"

// DataType is an ncclDataType_t.
type DataType int

// The element types of NCCL that distopt uses, with NCCL's values.
const (
	Int8     DataType = 0 // ncclInt8
	Uint8    DataType = 1 // ncclUint8
	Int32    DataType = 2 // ncclInt32
	Uint32   DataType = 3 // ncclUint32
	Int64    DataType = 4 // ncclInt64
	Uint64   DataType = 5 // ncclUint64
	Float16  DataType = 6 // ncclFloat16
	Float32  DataType = 7 // ncclFloat32
	Float64  DataType = 8 // ncclFloat64
	BFloat16 DataType = 9 // ncclBfloat16 (NCCL 2.10 and later)
)

// Size returns the size of one element in bytes.
func (t DataType) Size() int {
	switch t {
	case Int8, Uint8:
		return 1
	case Float16, BFloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	panic(fmt.Sprintf("nccl: unknown data type %d", int(t)))
}

var dataTypeNames = [...]string{"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64",
	"ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"}

func (t DataType) String() string {
	if t >= 0 && int(t) < len(dataTypeNames) {
		return dataTypeNames[t]
	}
	return fmt.Sprintf("ncclDataType(%d)", int(t))
}

// RedOp is an ncclRedOp_t.
type RedOp int

// The reductions of NCCL.
const (
	// Sum adds. The order of the additions depends on the algorithm NCCL
	// picks (ring, tree, ...) and is not specified.
	Sum RedOp = 0
	// Prod multiplies.
	Prod RedOp = 1
	// Max keeps the largest value. Floating point types use fmax (float,
	// double) and __hmax (bfloat16, half): a NaN loses against a number.
	Max RedOp = 2
	// Min keeps the smallest value, with fmin semantics for floats.
	Min RedOp = 3
	// Avg is Sum divided by the number of ranks. Floating point types are
	// first multiplied by 1/n rounded to the element type (ncclDevPreMulSum)
	// and then summed; integer types are summed and then divided.
	Avg RedOp = 4
)

var redOpNames = [...]string{"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"}

func (o RedOp) String() string {
	if o >= 0 && int(o) < len(redOpNames) {
		return redOpNames[o]
	}
	return fmt.Sprintf("ncclRedOp(%d)", int(o))
}

// UniqueIDBytes is the size of an ncclUniqueId.
const UniqueIDBytes = 128

// UniqueID is an ncclUniqueId: rank 0 creates it (Library.UniqueID) and
// every rank passes the same value to Library.InitRank.
type UniqueID [UniqueIDBytes]byte

// Config is the part of ncclConfig_t that distopt sets. A zero field leaves
// NCCL's default (or the matching NCCL_* environment variable) in force.
type Config struct {
	// Blocking selects blocking calls; false makes the communicator
	// non-blocking (see the package documentation).
	Blocking bool
	// CGAClusterSize, MinCTAs and MaxCTAs bound the thread blocks NCCL's
	// kernels use (0: NCCL's choice).
	CGAClusterSize, MinCTAs, MaxCTAs int
	// NetName selects the network plugin by name ("": NCCL's choice).
	NetName string
}
