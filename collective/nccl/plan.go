package nccl

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/nccl"
)

// A plan is what one group of ops becomes on the communication stream:
// kernels before the NCCL group (pre), the NCCL calls between
// ncclGroupStart and ncclGroupEnd (calls), and kernels after it (post).
// Buffers are user addresses or offsets into a scratch area of scratch
// bytes that the communicator provides when it issues the plan.
type plan struct {
	pre, post []launch
	calls     []call
	scratch   int
}

// addr is a device address: p itself, or p bytes into the scratch area.
type addr struct {
	p       uintptr
	scratch bool
}

func userAddr(p uintptr) addr { return addr{p: p} }

func (a addr) add(off int) addr { return addr{p: a.p + uintptr(off), scratch: a.scratch} }

// resolve returns the address, given the scratch area's base.
func (a addr) resolve(scratch uintptr) uintptr {
	if a.scratch {
		return scratch + a.p
	}
	return a.p
}

// collKind is the NCCL collective of a call.
type collKind int

const (
	collAllGather collKind = iota + 1
	collReduceScatter
	collAllReduce
	collBroadcast
	collSend // to rank root
	collRecv // from rank root
)

// call is one NCCL collective (count elements of dt, as NCCL counts them).
type call struct {
	kind       collKind
	send, recv addr
	count      int
	dt         nccl.DataType
	op         nccl.RedOp
	root       int
}

// kernel names a kernel of transform.cu.
type kernel int

const (
	kKeyF32 kernel = iota
	kUnkeyF32
	kKeyBF16
	kUnkeyBF16
	kKeyF64
	kUnkeyF64
	kWidenBF16
	kDivF32
	kDivF64
	kDivBF16
	numKernels
)

var kernelNames = [numKernels]string{"key_f32", "unkey_f32", "key_bf16", "unkey_bf16", "key_f64",
	"unkey_f64", "widen_bf16", "div_f32", "div_f64", "div_bf16"}

// launch is one kernel over n elements. Kernels with a divisor (div_*)
// take (x or dst, [src,] n, divisor); the others (dst, src, n).
type launch struct {
	k        kernel
	dst, src addr
	n        int
	divisor  float64
}

// scratchAlign aligns every scratch region.
const scratchAlign = 256

// planner turns groups of validated ops into plans for one rank.
type planner struct {
	rank, size int
	// exactAvg makes Avg of floating point types exact (see Config.ExactAvg).
	exactAvg bool
	// barrier is 4 bytes of device memory for the all-reduce of barriers.
	barrier uintptr
	// oneRankNoop plans nothing for in-place reductions and all-gathers
	// (one rank, without Config.OneRankCopies).
	oneRankNoop bool
}

// plan returns the plan of ops, which must be valid (collective.Op.Validate)
// device buffers. Ops with no elements are left out; all the barriers of a
// group become one 4-byte all-reduce, since the group completes as a whole.
func (pl planner) plan(ops []collective.Op) plan {
	var p plan
	barrier := false
	for _, op := range ops {
		switch op.Kind {
		case collective.OpAllGather:
			if pl.noop(op) {
				continue // one rank, in place: its block is the whole result
			}
			if m := op.Src.Len(); m > 0 {
				p.calls = append(p.calls, call{kind: collAllGather, send: ptr(op.Src), recv: ptr(op.Dst), count: m, dt: nccl.Uint8})
			}
		case collective.OpBroadcast:
			if m := op.Dst.Len(); m > 0 {
				p.calls = append(p.calls, call{kind: collBroadcast, send: ptr(op.Dst), recv: ptr(op.Dst), count: m, dt: nccl.Uint8, root: op.Root})
			}
		case collective.OpAllToAll:
			p.allToAll(op, pl.size)
		case collective.OpBarrier:
			barrier = true
		case collective.OpReduceScatter, collective.OpAllReduce:
			pl.reduction(&p, op)
		default:
			panic(fmt.Sprintf("collective/nccl: plan of %s", op.Kind))
		}
	}
	if barrier {
		b := userAddr(pl.barrier)
		p.calls = append(p.calls, call{kind: collAllReduce, send: b, recv: b, count: 1, dt: nccl.Uint32, op: nccl.Sum})
	}
	return p
}

// noop reports whether op needs no work: an in-place all-gather or
// reduction of one rank (with oneRankNoop), whose result is its input.
// NCCL would still run a kernel reading and writing every element (2 ms for
// 1.4G BF16 gradients).
func (pl planner) noop(op collective.Op) bool {
	return pl.oneRankNoop && ptr(op.Src) == ptr(op.Dst)
}

// reduction plans a reduce-scatter or all-reduce.
//
//   - Integers, floating point Sum, and floating point Avg without exactAvg
//     map onto NCCL directly.
//   - Floating point Max: the sources are turned into order keys in
//     scratch (key_*), NCCL takes the unsigned Max of the keys in place,
//     and unkey_* writes the result to dst.
//   - Floating point Avg with exactAvg: Float32 and Float64 are summed by
//     NCCL into dst and divided there (div_*); BFloat16 is widened to
//     float32 in scratch (widen_bf16), summed there by NCCL, and divided and
//     rounded into dst (div_bf16).
func (pl planner) reduction(p *plan, op collective.Op) {
	dt := op.DType
	size := dt.Size()
	count := op.Dst.Len() / size // elements NCCL counts (per rank for reduce-scatter)
	if count == 0 {
		return
	}
	if pl.noop(op) {
		return // the sum, average, maximum or minimum of one value is that value
	}
	total := op.Src.Len() / size // elements of src
	offset := 0                  // index of the first element of this rank's block
	kind := collAllReduce
	if op.Kind == collective.OpReduceScatter {
		kind = collReduceScatter
		offset = pl.rank * count
	}
	direct := call{kind: kind, send: ptr(op.Src), recv: ptr(op.Dst), count: count, dt: ncclType(dt), op: ncclOp(op.Reduce)}
	float := dt == buffer.BFloat16 || dt == buffer.Float32 || dt == buffer.Float64
	switch {
	case !float || op.Reduce == collective.Sum:
		p.calls = append(p.calls, direct)
	case op.Reduce == collective.Max:
		keyType, keySize, key, unkey := nccl.Uint32, 4, kKeyF32, kUnkeyF32
		switch dt {
		case buffer.BFloat16:
			key, unkey = kKeyBF16, kUnkeyBF16
		case buffer.Float64:
			keyType, keySize, key, unkey = nccl.Uint64, 8, kKeyF64, kUnkeyF64
		}
		s := p.alloc(total * keySize)
		p.pre = append(p.pre, launch{k: key, dst: s, src: ptr(op.Src), n: total})
		p.calls = append(p.calls, call{kind: kind, send: s, recv: s.add(offset * keySize), count: count, dt: keyType, op: nccl.Max})
		p.post = append(p.post, launch{k: unkey, dst: ptr(op.Dst), src: s.add(offset * keySize), n: count})
	case !pl.exactAvg: // Avg
		p.calls = append(p.calls, direct)
	case dt == buffer.BFloat16: // exact Avg
		s := p.alloc(total * 4)
		p.pre = append(p.pre, launch{k: kWidenBF16, dst: s, src: ptr(op.Src), n: total})
		p.calls = append(p.calls, call{kind: kind, send: s, recv: s.add(offset * 4), count: count, dt: nccl.Float32, op: nccl.Sum})
		p.post = append(p.post, launch{k: kDivBF16, dst: ptr(op.Dst), src: s.add(offset * 4), n: count, divisor: float64(pl.size)})
	default: // exact Avg of Float32 or Float64
		direct.op = nccl.Sum
		p.calls = append(p.calls, direct)
		k := kDivF32
		if dt == buffer.Float64 {
			k = kDivF64
		}
		p.post = append(p.post, launch{k: k, dst: ptr(op.Dst), n: count, divisor: float64(pl.size)})
	}
}

// allToAll plans an all-to-all as grouped point-to-point calls: block p of
// src is sent to every rank p, block p of dst received from it (this
// rank's own block included: NCCL copies a send to self).
func (p *plan) allToAll(op collective.Op, size int) {
	m := op.Src.Len() / size
	if m == 0 {
		return
	}
	src, dst := ptr(op.Src), ptr(op.Dst)
	for peer := range size {
		p.calls = append(p.calls,
			call{kind: collSend, send: src.add(peer * m), count: m, dt: nccl.Uint8, root: peer},
			call{kind: collRecv, recv: dst.add(peer * m), count: m, dt: nccl.Uint8, root: peer})
	}
}

// alloc reserves n bytes of scratch and returns their address.
func (p *plan) alloc(n int) addr {
	a := addr{p: uintptr(p.scratch), scratch: true}
	p.scratch += (n + scratchAlign - 1) / scratchAlign * scratchAlign
	return a
}

// empty reports whether the plan has nothing to run.
func (p *plan) empty() bool { return len(p.calls) == 0 && len(p.pre) == 0 && len(p.post) == 0 }

func ptr(b buffer.Buffer) addr { return userAddr(b.(buffer.DeviceBuffer).Ptr) }

// ncclType maps a buffer.DType onto NCCL's element type.
func ncclType(dt buffer.DType) nccl.DataType {
	switch dt {
	case buffer.Uint8:
		return nccl.Uint8
	case buffer.BFloat16:
		return nccl.BFloat16
	case buffer.Float32:
		return nccl.Float32
	case buffer.Float64:
		return nccl.Float64
	case buffer.Uint32:
		return nccl.Uint32
	case buffer.Int64:
		return nccl.Int64
	}
	panic(fmt.Sprintf("collective/nccl: no NCCL type for %s", dt))
}

// ncclOp maps a collective.ReduceOp onto NCCL's reduction.
func ncclOp(op collective.ReduceOp) nccl.RedOp {
	switch op {
	case collective.Sum:
		return nccl.Sum
	case collective.Avg:
		return nccl.Avg
	case collective.Max:
		return nccl.Max
	}
	panic(fmt.Sprintf("collective/nccl: no NCCL reduction for %s", op))
}
