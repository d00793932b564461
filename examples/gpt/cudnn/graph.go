package cudnn

import (
	"fmt"
	"strings"
)

// A graph is the operation graph handed to cuDNN, as plain Go data: the
// tensors (non-virtual ones are the buffers of the variant pack, virtual
// ones live only inside the fused kernel) and the operations that connect
// them, in order. emit turns it into backend descriptors; the tests run
// it on the CPU (interp_test.go) against a float64 reference.
type graph struct {
	name    string
	tensors []*tensor
	ops     []op
}

// dataType is a cudnnDataType_t.
type dataType int32

const (
	dtFloat   dataType = 0  // CUDNN_DATA_FLOAT
	dtInt32   dataType = 4  // CUDNN_DATA_INT32
	dtBF16    dataType = 9  // CUDNN_DATA_BFLOAT16
	dtBoolean dataType = 11 // CUDNN_DATA_BOOLEAN
)

func (t dataType) String() string {
	switch t {
	case dtFloat:
		return "f32"
	case dtInt32:
		return "i32"
	case dtBF16:
		return "bf16"
	case dtBoolean:
		return "bool"
	}
	return fmt.Sprintf("dataType(%d)", int32(t))
}

// tensor is one tensor descriptor: 4-D, dims and strides in elements.
type tensor struct {
	uid     int64
	name    string
	dtype   dataType
	dims    [4]int64
	strides [4]int64
	virtual bool
	// byValue marks a scalar passed by value (a host float in the
	// variant pack): value is its value.
	byValue bool
	value   float32
}

// opKind is the backend operation an op becomes.
type opKind int

const (
	opMatmul    opKind = iota // CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: out = in[0]·in[1], batched over dims 0, 1
	opPointwise               // CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR
	opReduction               // CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: over the dims out has as 1
	opReshape                 // CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: out views in[0]'s memory
)

// pwMode is a cudnnPointwiseMode_t.
type pwMode int32

const (
	pwAdd          pwMode = 0   // CUDNN_POINTWISE_ADD
	pwMul          pwMode = 1   // CUDNN_POINTWISE_MUL
	pwDiv          pwMode = 6   // CUDNN_POINTWISE_DIV
	pwSub          pwMode = 9   // CUDNN_POINTWISE_SUB
	pwExp          pwMode = 13  // CUDNN_POINTWISE_EXP
	pwLog          pwMode = 15  // CUDNN_POINTWISE_LOG
	pwIdentity     pwMode = 21  // CUDNN_POINTWISE_IDENTITY
	pwCmpGE        pwMode = 303 // CUDNN_POINTWISE_CMP_GE
	pwGenIndex     pwMode = 501 // CUDNN_POINTWISE_GEN_INDEX
	pwBinarySelect pwMode = 601 // CUDNN_POINTWISE_BINARY_SELECT: out = in[2] ? in[0] : in[1]
)

// redOp is a cudnnReduceTensorOp_t.
type redOp int32

const (
	redAdd redOp = 0 // CUDNN_REDUCE_TENSOR_ADD
	redMax redOp = 3 // CUDNN_REDUCE_TENSOR_MAX
)

// op is one operation: its inputs (in the backend's order: X, B, T for
// pointwise; A, B for matmul) and its one output.
type op struct {
	kind    opKind
	name    string
	in      []*tensor
	out     *tensor
	pw      pwMode
	red     redOp
	axis    int64    // GEN_INDEX: the dimension whose index is generated
	compute dataType // the math precision (pointwise, reduction, matmul)
}

// String lists the graph, one line per op, for error messages and logs.
func (g *graph) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", g.name)
	for _, o := range g.ops {
		ins := make([]string, len(o.in))
		for i, t := range o.in {
			ins[i] = t.name
		}
		fmt.Fprintf(&b, " %s=%s(%s);", o.out.name, o.name, strings.Join(ins, ","))
	}
	return b.String()
}

// builder appends tensors and ops to a graph, numbering virtual tensors
// from firstVirtualUID.
type builder struct {
	g       *graph
	nextUID int64
}

const firstVirtualUID = 100

func newBuilder(name string) *builder {
	return &builder{g: &graph{name: name}, nextUID: firstVirtualUID}
}

// io adds a non-virtual tensor (a buffer of the variant pack).
func (b *builder) io(uid int64, name string, dt dataType, dims, strides [4]int64) *tensor {
	t := &tensor{uid: uid, name: name, dtype: dt, dims: dims, strides: strides}
	b.g.tensors = append(b.g.tensors, t)
	return t
}

// scalar adds a float32 passed by value.
func (b *builder) scalar(uid int64, name string, v float32) *tensor {
	t := b.io(uid, name, dtFloat, [4]int64{1, 1, 1, 1}, [4]int64{1, 1, 1, 1})
	t.byValue, t.value = true, v
	return t
}

// virt adds a virtual tensor of packed strides.
func (b *builder) virt(name string, dt dataType, dims [4]int64) *tensor {
	t := &tensor{uid: b.nextUID, name: name, dtype: dt, dims: dims, strides: packed(dims), virtual: true}
	b.nextUID++
	b.g.tensors = append(b.g.tensors, t)
	return t
}

// packed returns the row-major strides of dims.
func packed(dims [4]int64) [4]int64 {
	return [4]int64{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}
}

// pointwise appends out = mode(in...) computed in compute.
func (b *builder) pointwise(name string, mode pwMode, compute dataType, out *tensor, in ...*tensor) *tensor {
	b.g.ops = append(b.g.ops, op{kind: opPointwise, name: name, pw: mode, compute: compute, in: in, out: out})
	return out
}

// genIndex appends out = the index along axis of each element of like.
func (b *builder) genIndex(name string, axis int64, out, like *tensor) *tensor {
	b.g.ops = append(b.g.ops, op{kind: opPointwise, name: name, pw: pwGenIndex, compute: dtFloat, axis: axis,
		in: []*tensor{like}, out: out})
	return out
}

func (b *builder) matmul(name string, out, a, bb *tensor) *tensor {
	b.g.ops = append(b.g.ops, op{kind: opMatmul, name: name, compute: dtFloat, in: []*tensor{a, bb}, out: out})
	return out
}

func (b *builder) reduce(name string, r redOp, out, in *tensor) *tensor {
	b.g.ops = append(b.g.ops, op{kind: opReduction, name: name, red: r, compute: dtFloat, in: []*tensor{in}, out: out})
	return out
}

func (b *builder) reshape(name string, out, in *tensor) *tensor {
	b.g.ops = append(b.g.ops, op{kind: opReshape, name: name, in: []*tensor{in}, out: out})
	return out
}

// virtStrided adds a virtual tensor of the given strides (the output of a
// reshape, a view of its input's memory).
func (b *builder) virtStrided(name string, dt dataType, dims, strides [4]int64) *tensor {
	t := b.virt(name, dt, dims)
	t.strides = strides
	return t
}
