package cudnn

import (
	"errors"
	"strings"
	"testing"
	"unsafe"
)

// fakeAPI records the backend calls of the emitter and plays the library:
// it refuses the first engine configurations (refuse of them) and offers
// configs of them.
type fakeAPI struct {
	t         *testing.T
	kinds     []descType // by descriptor - 1
	finalized map[uintptr]bool
	attrs     map[uintptr]map[attrName][]int64
	configs   int
	refuse    int
	planTries int
	executed  map[attrName][]int64 // the last variant pack
	streamSet uintptr
	nondet    int             // the first nondet configurations are nondeterministic
	cfgIndex  map[uintptr]int // each configuration's rank in the heuristics' results
	engineOf  map[uintptr]int // the rank of the configuration each engine descriptor was read from
	engines   int             // engine descriptors read
}

// attrTypes is the type every attribute must be set with (the backend
// API reference's table of each descriptor's attributes).
var attrTypes = map[attrName]attrType{
	attrPointwiseMode: typePointwiseMode, attrPointwiseMathPrec: typeDataType, attrPointwiseAxis: typeInt64,
	attrHeurMode: typeHeurMode, attrHeurGraph: typeDescriptor, attrPlanHandle: typeHandle,
	attrPlanEngineCfg: typeDescriptor, attrOpPointwiseDesc: typeDescriptor, attrOpPointwiseX: typeDescriptor,
	attrOpPointwiseB: typeDescriptor, attrOpPointwiseY: typeDescriptor, attrOpPointwiseT: typeDescriptor,
	attrGraphHandle: typeHandle, attrGraphOps: typeDescriptor, attrTensorAlignment: typeInt64,
	attrTensorDataType: typeDataType, attrTensorDims: typeInt64, attrTensorStrides: typeInt64,
	attrTensorUID: typeInt64, attrTensorVirtual: typeBoolean, attrTensorByValue: typeBoolean,
	attrPackUIDs: typeInt64, attrPackPointers: typeVoidPtr, attrPackWorkspace: typeVoidPtr,
	attrMatmulCompType: typeDataType, attrOpMatmulA: typeDescriptor, attrOpMatmulB: typeDescriptor,
	attrOpMatmulC: typeDescriptor, attrOpMatmulDesc: typeDescriptor, attrReductionOperator: typeReductionOp,
	attrReductionCompType: typeDataType, attrOpReductionX: typeDescriptor, attrOpReductionY: typeDescriptor,
	attrOpReductionDesc: typeDescriptor, attrOpReshapeX: typeDescriptor, attrOpReshapeY: typeDescriptor,
}

func newFake(t *testing.T, configs, refuse int) *fakeAPI {
	return &fakeAPI{t: t, finalized: map[uintptr]bool{}, attrs: map[uintptr]map[attrName][]int64{},
		configs: configs, refuse: refuse, cfgIndex: map[uintptr]int{}, engineOf: map[uintptr]int{}}
}

const fakeNotSupported Status = 3000

func (f *fakeAPI) version() int { return 91900 }
func (f *fakeAPI) errorString(s Status) string {
	if s == fakeNotSupported {
		return "CUDNN_STATUS_NOT_SUPPORTED"
	}
	return "CUDNN_STATUS_BAD_PARAM"
}
func (f *fakeAPI) lastError() string             { return "engine refused the graph" }
func (f *fakeAPI) create() (uintptr, Status)     { return 0xabc, 0 }
func (f *fakeAPI) destroy(uintptr) Status        { return 0 }
func (f *fakeAPI) setStream(_, s uintptr) Status { f.streamSet = s; return 0 }
func (f *fakeAPI) destroyDesc(uintptr) Status    { return 0 }

func (f *fakeAPI) createDesc(t descType) (uintptr, Status) {
	f.kinds = append(f.kinds, t)
	d := uintptr(len(f.kinds))
	f.attrs[d] = map[attrName][]int64{}
	return d, 0
}

func (f *fakeAPI) set(d uintptr, name attrName, typ attrType, n int, v unsafe.Pointer) Status {
	if want, ok := attrTypes[name]; !ok || want != typ {
		f.t.Errorf("attribute %d set with type %d, want %d", name, typ, want)
	}
	if f.finalized[d] {
		f.t.Errorf("attribute %d set on finalized descriptor %d", name, d)
	}
	vals := make([]int64, n)
	for i := range n {
		switch typ {
		case typeInt64:
			vals[i] = *(*int64)(unsafe.Add(v, 8*i))
		case typeDescriptor, typeHandle, typeVoidPtr:
			vals[i] = int64(*(*uintptr)(unsafe.Add(v, 8*i)))
			if typ == typeDescriptor && !f.finalized[uintptr(vals[i])] {
				f.t.Errorf("attribute %d of descriptor %d names descriptor %d before it is finalized", name, d, vals[i])
			}
		case typeBoolean:
			vals[i] = int64(*(*byte)(v))
		default:
			vals[i] = int64(*(*int32)(v))
		}
	}
	f.attrs[d][name] = vals
	return 0
}

func (f *fakeAPI) get(d uintptr, name attrName, typ attrType, want int, v unsafe.Pointer) (int, Status) {
	switch name {
	case attrHeurResults:
		for i := range min(want, f.configs) {
			c := *(*uintptr)(unsafe.Add(v, 8*i))
			f.finalized[c] = true
			f.cfgIndex[c] = i
		}
		return f.configs, 0
	case attrEngineCfgEngine:
		i, ok := f.cfgIndex[d]
		eng := *(*uintptr)(v)
		if !ok || typ != typeDescriptor || want != 1 || f.kinds[eng-1] != descEngine {
			f.t.Errorf("engine of descriptor %d (a config: %v) read with type %d into a %v", d, ok, typ, f.kinds[eng-1])
			return 0, 2000
		}
		f.engineOf[eng] = i
		f.finalized[eng] = true
		f.engines++
		return 1, 0
	case attrEngineNotes:
		i, ok := f.engineOf[d]
		if !ok || typ != typeNumericalNote || want < 2 {
			f.t.Errorf("numerical notes of descriptor %d (an engine: %v) read with type %d, room for %d", d, ok, typ, want)
			return 0, 2000
		}
		notes := []int32{0} // tensor cores
		if i < f.nondet {
			notes = append(notes, noteNondeterministic)
		}
		for j, n := range notes {
			*(*int32)(unsafe.Add(v, 4*j)) = n
		}
		return len(notes), 0
	case attrPlanWorkspace:
		*(*int64)(v) = 4096
		return 1, 0
	}
	f.t.Errorf("get of attribute %d", name)
	return 0, 3
}

func (f *fakeAPI) finalize(d uintptr) Status {
	if f.kinds[d-1] == descPlan {
		f.planTries++
		if f.planTries <= f.refuse {
			return fakeNotSupported
		}
	}
	f.finalized[d] = true
	return 0
}

func (f *fakeAPI) execute(h, plan, pack uintptr) Status {
	if !f.finalized[plan] || !f.finalized[pack] {
		f.t.Error("execute of a plan or pack not finalized")
	}
	f.executed = f.attrs[pack]
	return 0
}

// TestPlanEmission builds both graphs' plans through the recorder: every
// attribute is set with its type, on a descriptor not yet finalized, and
// names only finalized descriptors; the plan is the first configuration
// that finalizes; the variant pack lists the non-virtual tensors sorted,
// with the buffers given.
func TestPlanEmission(t *testing.T) {
	s := Shape{Batch: 2, Heads: 3, Seq: 128, D: 64}
	for _, g := range []*graph{forwardGraph(s, RowLayout(s), 0.125, maskValue(91900)), backwardGraph(s, RowLayout(s), 0.125, maskValue(91900), false), backwardGraph(s, RowLayout(s), 0.125, maskValue(91900), true)} {
		f := newFake(t, 3, 2)
		l := &Library{fns: f, version: f.version()}
		p, err := newPlan(l, 0xabc, g, 1<<20, false)
		if err != nil {
			t.Fatal(err)
		}
		if f.planTries != 3 || p.workspace != 4096 {
			t.Errorf("%s: %d plans tried, workspace %d; want 3 and 4096", g.name, f.planTries, p.workspace)
		}
		ptrs := map[int64]uintptr{}
		for _, u := range p.uids {
			ptrs[u] = uintptr(0x1000 * u)
		}
		if err := p.run(0x77, ptrs, 0x9000); err != nil {
			t.Fatal(err)
		}
		ids, addrs := f.executed[attrPackUIDs], f.executed[attrPackPointers]
		for i, u := range ids {
			if i > 0 && ids[i-1] >= u {
				t.Errorf("%s: pack ids %v not sorted", g.name, ids)
			}
			if _, scalar := p.scalars[u]; !scalar && addrs[i] != int64(0x1000*u) {
				t.Errorf("%s: tensor %d given %#x", g.name, u, addrs[i])
			}
		}
		if f.streamSet != 0x77 || f.executed[attrPackWorkspace][0] != 0x9000 {
			t.Errorf("%s: stream %#x, workspace %#x", g.name, f.streamSet, f.executed[attrPackWorkspace][0])
		}
		delete(ptrs, uidQ)
		if err := p.run(0x77, ptrs, 0); err == nil {
			t.Errorf("%s: run without q's buffer succeeded", g.name)
		}
		p.destroy()
	}
}

// TestPlanRefused checks the error when no engine finalizes: it matches
// ErrNotSupported and carries cuDNN's message and the logging advice.
func TestPlanRefused(t *testing.T) {
	s := Shape{Batch: 1, Heads: 1, Seq: 128, D: 64}
	f := newFake(t, 2, 2)
	_, err := newPlan(&Library{fns: f, version: 91900}, 0xabc, forwardGraph(s, PackedLayout(s), 0.125, maskValue(91900)), 1<<20, false)
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("error %v, want one matching ErrNotSupported", err)
	}
	for _, want := range []string{"engine refused the graph", "CUDNN_STATUS_NOT_SUPPORTED", "CUDNN_LOGLEVEL_DBG=2", "bmm2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestPlanDeterministic checks Config.Deterministic's engine choice on the
// fake library: the engines the heuristics rank first carry the
// nondeterministic note, and a deterministic plan takes the first engine
// without it (reading every engine's notes with the types the backend
// API names), a plain plan takes the first engine; and with no engine
// left, ErrNotSupported names the reason.
func TestPlanDeterministic(t *testing.T) {
	s := Shape{Batch: 1, Heads: 1, Seq: 128, D: 64}
	g := func() *graph { return backwardGraph(s, PackedLayout(s), 0.125, maskValue(91900), false) }
	for _, c := range []struct {
		deterministic bool
		nondet, want  int // the configuration the plan must take (-1: none)
	}{{false, 2, 0}, {true, 2, 2}, {true, 0, 0}, {true, 3, -1}} {
		f := newFake(t, 3, 0)
		f.nondet = c.nondet
		p, err := newPlan(&Library{fns: f, version: 91900}, 0xabc, g(), 1<<20, c.deterministic)
		if c.want < 0 {
			if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "nondeterministic") {
				t.Errorf("deterministic with every engine nondeterministic: error %v, want ErrNotSupported naming the note", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("deterministic %v, %d nondeterministic engines: %v", c.deterministic, c.nondet, err)
		}
		cfg := uintptr(f.attrs[p.exec][attrPlanEngineCfg][0])
		if got := f.cfgIndex[cfg]; got != c.want {
			t.Errorf("deterministic %v, %d nondeterministic engines: took configuration %d, want %d", c.deterministic, c.nondet, got, c.want)
		}
		if wantRead := map[bool]int{false: 0, true: c.want + 1}[c.deterministic]; f.engines != wantRead {
			t.Errorf("deterministic %v: read %d engines' notes, want %d", c.deterministic, f.engines, wantRead)
		}
	}
}
