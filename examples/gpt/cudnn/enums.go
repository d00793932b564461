package cudnn

// The values of the cuDNN backend API's enums that the package uses, as
// cudnn_graph.h (cuDNN 9) numbers them: cudnnBackendDescriptorType_t,
// cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
// cudnnDataType_t, cudnnPointwiseMode_t, cudnnReduceTensorOp_t and
// cudnnBackendHeurMode_t. See NVIDIA's cuDNN backend API reference
// (docs.nvidia.com/deeplearning/cudnn, "Backend Descriptor Types" and
// "Data Type References").

// descType is a cudnnBackendDescriptorType_t.
type descType int32

const (
	descPointwise   descType = 0  // CUDNN_BACKEND_POINTWISE_DESCRIPTOR
	descEngine      descType = 2  // CUDNN_BACKEND_ENGINE_DESCRIPTOR
	descEngineCfg   descType = 3  // CUDNN_BACKEND_ENGINECFG_DESCRIPTOR
	descEngineHeur  descType = 4  // CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR
	descPlan        descType = 5  // CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR
	descOpPointwise descType = 13 // CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR
	descOpGraph     descType = 15 // CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR
	descVariantPack descType = 16 // CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
	descTensor      descType = 17 // CUDNN_BACKEND_TENSOR_DESCRIPTOR
	descMatmul      descType = 18 // CUDNN_BACKEND_MATMUL_DESCRIPTOR
	descOpMatmul    descType = 19 // CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR
	descReduction   descType = 21 // CUDNN_BACKEND_REDUCTION_DESCRIPTOR
	descOpReduction descType = 22 // CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR
	descOpReshape   descType = 31 // CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR
)

// attrName is a cudnnBackendAttributeName_t.
type attrName int32

const (
	attrPointwiseMode     attrName = 0    // CUDNN_ATTR_POINTWISE_MODE
	attrPointwiseMathPrec attrName = 1    // CUDNN_ATTR_POINTWISE_MATH_PREC
	attrPointwiseAxis     attrName = 9    // CUDNN_ATTR_POINTWISE_AXIS
	attrHeurMode          attrName = 200  // CUDNN_ATTR_ENGINEHEUR_MODE
	attrHeurGraph         attrName = 201  // CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH
	attrHeurResults       attrName = 202  // CUDNN_ATTR_ENGINEHEUR_RESULTS
	attrEngineCfgEngine   attrName = 300  // CUDNN_ATTR_ENGINECFG_ENGINE
	attrPlanHandle        attrName = 400  // CUDNN_ATTR_EXECUTION_PLAN_HANDLE
	attrPlanEngineCfg     attrName = 401  // CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG
	attrPlanWorkspace     attrName = 402  // CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE
	attrEngineNotes       attrName = 1303 // CUDNN_ATTR_ENGINE_NUMERICAL_NOTE
	attrOpPointwiseDesc   attrName = 750  // CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR
	attrOpPointwiseX      attrName = 751  // CUDNN_ATTR_OPERATION_POINTWISE_XDESC
	attrOpPointwiseB      attrName = 752  // CUDNN_ATTR_OPERATION_POINTWISE_BDESC
	attrOpPointwiseY      attrName = 753  // CUDNN_ATTR_OPERATION_POINTWISE_YDESC
	attrOpPointwiseT      attrName = 758  // CUDNN_ATTR_OPERATION_POINTWISE_TDESC
	attrGraphHandle       attrName = 800  // CUDNN_ATTR_OPERATIONGRAPH_HANDLE
	attrGraphOps          attrName = 801  // CUDNN_ATTR_OPERATIONGRAPH_OPS
	attrTensorAlignment   attrName = 900  // CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT
	attrTensorDataType    attrName = 901  // CUDNN_ATTR_TENSOR_DATA_TYPE
	attrTensorDims        attrName = 902  // CUDNN_ATTR_TENSOR_DIMENSIONS
	attrTensorStrides     attrName = 903  // CUDNN_ATTR_TENSOR_STRIDES
	attrTensorUID         attrName = 906  // CUDNN_ATTR_TENSOR_UNIQUE_ID
	attrTensorVirtual     attrName = 907  // CUDNN_ATTR_TENSOR_IS_VIRTUAL
	attrTensorByValue     attrName = 908  // CUDNN_ATTR_TENSOR_IS_BY_VALUE
	attrPackUIDs          attrName = 1000 // CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS
	attrPackPointers      attrName = 1001 // CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS
	attrPackWorkspace     attrName = 1003 // CUDNN_ATTR_VARIANT_PACK_WORKSPACE
	attrMatmulCompType    attrName = 1500 // CUDNN_ATTR_MATMUL_COMP_TYPE
	attrOpMatmulA         attrName = 1520 // CUDNN_ATTR_OPERATION_MATMUL_ADESC
	attrOpMatmulB         attrName = 1521 // CUDNN_ATTR_OPERATION_MATMUL_BDESC
	attrOpMatmulC         attrName = 1522 // CUDNN_ATTR_OPERATION_MATMUL_CDESC
	attrOpMatmulDesc      attrName = 1523 // CUDNN_ATTR_OPERATION_MATMUL_DESC
	attrReductionOperator attrName = 1600 // CUDNN_ATTR_REDUCTION_OPERATOR
	attrReductionCompType attrName = 1601 // CUDNN_ATTR_REDUCTION_COMP_TYPE
	attrOpReductionX      attrName = 1610 // CUDNN_ATTR_OPERATION_REDUCTION_XDESC
	attrOpReductionY      attrName = 1611 // CUDNN_ATTR_OPERATION_REDUCTION_YDESC
	attrOpReductionDesc   attrName = 1612 // CUDNN_ATTR_OPERATION_REDUCTION_DESC
	attrOpReshapeX        attrName = 2200 // CUDNN_ATTR_OPERATION_RESHAPE_XDESC
	attrOpReshapeY        attrName = 2201 // CUDNN_ATTR_OPERATION_RESHAPE_YDESC
)

// attrType is a cudnnBackendAttributeType_t.
type attrType int32

const (
	typeHandle        attrType = 0  // CUDNN_TYPE_HANDLE
	typeDataType      attrType = 1  // CUDNN_TYPE_DATA_TYPE
	typeBoolean       attrType = 2  // CUDNN_TYPE_BOOLEAN
	typeInt64         attrType = 3  // CUDNN_TYPE_INT64
	typeVoidPtr       attrType = 6  // CUDNN_TYPE_VOID_PTR
	typeHeurMode      attrType = 8  // CUDNN_TYPE_HEUR_MODE
	typeNumericalNote attrType = 11 // CUDNN_TYPE_NUMERICAL_NOTE
	typePointwiseMode attrType = 14 // CUDNN_TYPE_POINTWISE_MODE
	typeDescriptor    attrType = 15 // CUDNN_TYPE_BACKEND_DESCRIPTOR
	typeReductionOp   attrType = 18 // CUDNN_TYPE_REDUCTION_OPERATOR_TYPE
)

// heurModeA is CUDNN_HEUR_MODE_A (cudnnBackendHeurMode_t), the heuristic
// the fused-attention engines are ranked by.
const heurModeA int32 = 3

// noteNondeterministic is CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
// (cudnnBackendNumericalNote_t): the engine may give other bits for the
// same inputs from run to run. maxNotes bounds the notes read of one
// engine (cuDNN 9 defines fewer kinds).
const (
	noteNondeterministic int32 = 4
	maxNotes                   = 16
)
