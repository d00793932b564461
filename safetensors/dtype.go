package safetensors

// DType is an element type as the format spells it in the header.
type DType string

// The element types of the format.
const (
	F64    DType = "F64"     // IEEE binary64
	F32    DType = "F32"     // IEEE binary32
	F16    DType = "F16"     // IEEE binary16
	BF16   DType = "BF16"    // bfloat16
	F8E4M3 DType = "F8_E4M3" // OCP FP8 E4M3
	F8E5M2 DType = "F8_E5M2" // OCP FP8 E5M2
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U64    DType = "U64"
	U32    DType = "U32"
	U16    DType = "U16"
	U8     DType = "U8"
	Bool   DType = "BOOL"
)

// Size returns the size of one element in bytes, or 0 for a type this
// package does not know.
func (d DType) Size() int {
	switch d {
	case F64, I64, U64:
		return 8
	case F32, I32, U32:
		return 4
	case F16, BF16, I16, U16:
		return 2
	case F8E4M3, F8E5M2, I8, U8, Bool:
		return 1
	}
	return 0
}
