package cudnn

import (
	"fmt"
	"unsafe"
)

// emitter turns a graph into backend descriptors through the library's
// generic calls (create, set attribute, finalize), keeping every
// descriptor it made for destroy. The first failure sticks: later calls do
// nothing and err reports it, naming the step.
type emitter struct {
	l       *Library
	made    []uintptr
	tensors map[*tensor]uintptr
	err     error
}

// tensorAlignment is the byte alignment declared for every tensor (and
// checked of every pointer handed to Forward and Backward).
const tensorAlignment = 16

func newEmitter(l *Library) *emitter { return &emitter{l: l, tensors: map[*tensor]uintptr{}} }

func (e *emitter) fail(step string, s Status) {
	if e.err == nil && s != StatusSuccess {
		e.err = e.l.check(step, s)
	}
}

func (e *emitter) create(t descType, step string) uintptr {
	if e.err != nil {
		return 0
	}
	d, s := e.l.fns.createDesc(t)
	e.fail("create "+step, s)
	if s == StatusSuccess {
		e.made = append(e.made, d)
	}
	return d
}

// set passes n values of type typ at v.
func (e *emitter) set(d uintptr, name attrName, typ attrType, n int, v unsafe.Pointer, step string) {
	if e.err == nil {
		e.fail(fmt.Sprintf("set attribute %d of %s", name, step), e.l.fns.set(d, name, typ, n, v))
	}
}

func (e *emitter) setInt64s(d uintptr, name attrName, v []int64, step string) {
	e.set(d, name, typeInt64, len(v), unsafe.Pointer(&v[0]), step)
}

func (e *emitter) setInt32(d uintptr, name attrName, typ attrType, v int32, step string) {
	e.set(d, name, typ, 1, unsafe.Pointer(&v), step)
}

func (e *emitter) setBool(d uintptr, name attrName, v bool, step string) {
	b := byte(0)
	if v {
		b = 1
	}
	e.set(d, name, typeBoolean, 1, unsafe.Pointer(&b), step)
}

func (e *emitter) setDescs(d uintptr, name attrName, step string, v ...uintptr) {
	e.set(d, name, typeDescriptor, len(v), unsafe.Pointer(&v[0]), step)
}

func (e *emitter) finalize(d uintptr, step string) {
	if e.err == nil {
		e.fail("finalize "+step, e.l.fns.finalize(d))
	}
}

// destroy releases every descriptor made, newest first.
func (e *emitter) destroy() {
	for i := len(e.made) - 1; i >= 0; i-- {
		e.l.fns.destroyDesc(e.made[i])
	}
	e.made = nil
}

// tensor emits t's descriptor.
func (e *emitter) tensor(t *tensor) uintptr {
	step := "tensor " + t.name
	d := e.create(descTensor, step)
	e.setInt32(d, attrTensorDataType, typeDataType, int32(t.dtype), step)
	e.setInt64s(d, attrTensorDims, t.dims[:], step)
	e.setInt64s(d, attrTensorStrides, t.strides[:], step)
	e.setInt64s(d, attrTensorUID, []int64{t.uid}, step)
	e.setInt64s(d, attrTensorAlignment, []int64{tensorAlignment}, step)
	e.setBool(d, attrTensorVirtual, t.virtual, step)
	if t.byValue {
		e.setBool(d, attrTensorByValue, true, step)
	}
	e.finalize(d, step)
	e.tensors[t] = d
	return d
}

// op emits o's descriptors and returns its operation descriptor.
func (e *emitter) op(o *op) uintptr {
	step := "op " + o.name
	t := func(i int) uintptr { return e.tensors[o.in[i]] }
	y := e.tensors[o.out]
	var d uintptr
	switch o.kind {
	case opMatmul:
		m := e.create(descMatmul, step)
		e.setInt32(m, attrMatmulCompType, typeDataType, int32(o.compute), step)
		e.finalize(m, step)
		d = e.create(descOpMatmul, step)
		e.setDescs(d, attrOpMatmulA, step, t(0))
		e.setDescs(d, attrOpMatmulB, step, t(1))
		e.setDescs(d, attrOpMatmulC, step, y)
		e.setDescs(d, attrOpMatmulDesc, step, m)
	case opPointwise:
		d = e.pointwise(o, step, y)
	case opReduction:
		r := e.create(descReduction, step)
		e.setInt32(r, attrReductionOperator, typeReductionOp, int32(o.red), step)
		e.setInt32(r, attrReductionCompType, typeDataType, int32(o.compute), step)
		e.finalize(r, step)
		d = e.create(descOpReduction, step)
		e.setDescs(d, attrOpReductionX, step, t(0))
		e.setDescs(d, attrOpReductionY, step, y)
		e.setDescs(d, attrOpReductionDesc, step, r)
	case opReshape:
		d = e.create(descOpReshape, step)
		e.setDescs(d, attrOpReshapeX, step, t(0))
		e.setDescs(d, attrOpReshapeY, step, y)
	}
	e.finalize(d, step)
	return d
}

// pointwise emits the pointwise descriptor of o and its operation (not
// finalized): inputs X, B, T in that order, output Y.
func (e *emitter) pointwise(o *op, step string, y uintptr) uintptr {
	p := e.create(descPointwise, step)
	e.setInt32(p, attrPointwiseMode, typePointwiseMode, int32(o.pw), step)
	e.setInt32(p, attrPointwiseMathPrec, typeDataType, int32(o.compute), step)
	if o.pw == pwGenIndex {
		e.setInt64s(p, attrPointwiseAxis, []int64{o.axis}, step)
	}
	e.finalize(p, step)
	d := e.create(descOpPointwise, step)
	e.setDescs(d, attrOpPointwiseDesc, step, p)
	e.setDescs(d, attrOpPointwiseX, step, e.tensors[o.in[0]])
	if len(o.in) > 1 {
		e.setDescs(d, attrOpPointwiseB, step, e.tensors[o.in[1]])
	}
	if len(o.in) > 2 {
		e.setDescs(d, attrOpPointwiseT, step, e.tensors[o.in[2]])
	}
	e.setDescs(d, attrOpPointwiseY, step, y)
	return d
}

// graph emits g's tensors and operations and the finalized operation
// graph on handle h.
func (e *emitter) graph(g *graph, h uintptr) uintptr {
	for _, t := range g.tensors {
		e.tensor(t)
	}
	ops := make([]uintptr, len(g.ops))
	for i := range g.ops {
		ops[i] = e.op(&g.ops[i])
	}
	step := "operation graph " + g.name
	d := e.create(descOpGraph, step)
	e.set(d, attrGraphHandle, typeHandle, 1, unsafe.Pointer(&h), step)
	e.setDescs(d, attrGraphOps, step, ops...)
	e.finalize(d, step)
	return d
}
