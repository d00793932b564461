package cublaslt

// DataType is a cudaDataType_t.
type DataType int32

// The data types distopt uses (cudaDataType_t values).
const (
	R32F    DataType = 0  // CUDA_R_32F: float32
	R16F    DataType = 2  // CUDA_R_16F: float16
	R16BF   DataType = 14 // CUDA_R_16BF: bfloat16
	R8FE4M3 DataType = 28 // CUDA_R_8F_E4M3
	R8FE5M2 DataType = 29 // CUDA_R_8F_E5M2
)

// Size returns the bytes of one element.
func (t DataType) Size() int {
	switch t {
	case R32F:
		return 4
	case R16F, R16BF:
		return 2
	}
	return 1
}

// ComputeType is a cublasComputeType_t.
type ComputeType int32

// Compute types (cublasComputeType_t values).
const (
	// Compute32F is CUBLAS_COMPUTE_32F: FP32 accumulation. FP8, BF16 and
	// FP16 inputs run on tensor cores with it; FP32 inputs run in full
	// FP32 on the CUDA cores (exact products, FP32 sums).
	Compute32F ComputeType = 68
	// Compute32FFastTF32 is CUBLAS_COMPUTE_32F_FAST_TF32: FP32 inputs are
	// rounded to TF32 (10 explicit mantissa bits, relative error up to
	// 2^-11 per input) and multiplied on tensor cores with FP32
	// accumulation: several times the FP32 speed.
	Compute32FFastTF32 ComputeType = 77
)

// Op is a cublasOperation_t.
type Op int32

// Operations on an operand.
const (
	OpN Op = 0 // CUBLAS_OP_N: as stored
	OpT Op = 1 // CUBLAS_OP_T: transposed
)

// ScaleMode is a cublasLtMatmulMatrixScale_t: how the scale pointer of an
// operand is read.
type ScaleMode int32

// Scale modes (cuBLASLt 12.8+; the block modes run on Hopper from 12.9).
const (
	// ScaleScalar32F: one float32 for the whole operand.
	ScaleScalar32F ScaleMode = 0
	// ScaleVec32UE8M0: one E8M0 byte per 32 elements along K (MX; Blackwell).
	ScaleVec32UE8M0 ScaleMode = 2
	// ScaleOuterVec32F: one float32 per row of the outer dimension.
	ScaleOuterVec32F ScaleMode = 3
	// ScaleVec128F32: one float32 per 128 elements along K, stored with
	// the outer dimension contiguous: scale[k/128 * outer + o].
	ScaleVec128F32 ScaleMode = 4
	// ScaleBlk128x128F32: one float32 per 128x128 block, stored with the K
	// blocks contiguous: scale[o/128 * ld + k/128], ld a multiple of 4.
	ScaleBlk128x128F32 ScaleMode = 5
)

// descAttr is a cublasLtMatmulDescAttributes_t.
type descAttr int32

const (
	descTransA       descAttr = 3
	descTransB       descAttr = 4
	descEpilogue     descAttr = 7 // CUBLASLT_MATMUL_DESC_EPILOGUE, uint32 (a cublasLtEpilogue_t)
	descBiasPtr      descAttr = 8 // CUBLASLT_MATMUL_DESC_BIAS_POINTER, const void *
	descAScalePtr    descAttr = 17
	descBScalePtr    descAttr = 18
	descCScalePtr    descAttr = 19
	descDScalePtr    descAttr = 20
	descAmaxDPtr     descAttr = 21
	descFastAccum    descAttr = 25
	descBiasType     descAttr = 26 // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32 (a cudaDataType_t)
	descAScaleMode   descAttr = 31
	descBScaleMode   descAttr = 32
	prefMaxWorkspace descAttr = 1 // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES (a preference attribute)
)

// layoutAttr is a cublasLtMatrixLayoutAttribute_t.
type layoutAttr int32

const (
	layoutBatchCount  layoutAttr = 5 // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32
	layoutBatchStride layoutAttr = 6 // CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, int64 elements
)

// The preference attributes CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES
// (uint32) are 5 to 8, in that order; lt_cgo.go sets them.

// Epilogue is a cublasLtEpilogue_t: what cuBLASLt does to the product
// before it writes D.
type Epilogue uint32

// The epilogues distopt uses (cublasLtEpilogue_t values).
const (
	// EpilogueDefault (CUBLASLT_EPILOGUE_DEFAULT): D is the scaled product
	// (plus beta·C), converted to D's type.
	EpilogueDefault Epilogue = 1
	// EpilogueBias (CUBLASLT_EPILOGUE_BIAS): a bias vector, one element per
	// row of D (packed, stride 1), is broadcast over D's columns and added
	// before the conversion to D's type.
	EpilogueBias Epilogue = 4
)
