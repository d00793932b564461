package cudnn

import (
	"fmt"
	"slices"
	"strings"
	"unsafe"
)

// plan is an execution plan of one graph: the engine configuration the
// heuristics ranked first among those that finalize within the workspace
// bound, with the descriptors it was built from (all kept until destroy).
type plan struct {
	e         *emitter
	g         *graph
	h         uintptr // the cudnnHandle_t
	exec      uintptr
	workspace int
	uids      []int64              // the non-virtual tensors, in pack order
	scalars   map[int64]hostScalar // the values of by-value tensors
}

// debugAdvice ends the errors of graphs cuDNN refuses.
const debugAdvice = "run with CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr for cuDNN's reasons"

// newPlan emits g on handle h, asks the heuristics (mode A) for engine
// configurations and keeps the first whose execution plan finalizes with a
// workspace of at most maxWorkspace bytes. It runs on the device's worker
// thread. The error matches ErrNotSupported when no configuration does.
func newPlan(l *Library, h uintptr, g *graph, maxWorkspace int, deterministic bool) (*plan, error) {
	e := newEmitter(l)
	opGraph := e.graph(g, h)
	cfgs := e.engineConfigs(opGraph, g.name)
	if e.err != nil {
		e.destroy()
		return nil, fmt.Errorf("%w [%s; %s]", e.err, g, debugAdvice)
	}
	p := &plan{e: e, g: g, h: h, scalars: map[int64]hostScalar{}}
	var why []string
	for i, c := range cfgs {
		if deterministic {
			nd, err := e.nondeterministic(c)
			switch {
			case err != nil:
				why = append(why, fmt.Sprintf("engine config %d: numerical notes unreadable (%v)", i, err))
				continue
			case nd:
				why = append(why, fmt.Sprintf("engine config %d: nondeterministic (Config.Deterministic)", i))
				continue
			}
		}
		exec, ws, err := p.tryConfig(c)
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("engine config %d: %v", i, err))
		case ws > maxWorkspace:
			why = append(why, fmt.Sprintf("engine config %d: workspace %d bytes over the bound %d", i, ws, maxWorkspace))
		default:
			p.exec, p.workspace = exec, ws
			p.packOrder()
			return p, nil
		}
	}
	e.destroy()
	if len(cfgs) == 0 {
		why = append(why, "the heuristics returned no engine configuration")
	}
	return nil, fmt.Errorf("%w: %s refused by every engine (%s) [%s; %s]", ErrNotSupported, g.name,
		strings.Join(why, "; "), g, debugAdvice)
}

// engineConfigs returns the heuristics' engine configurations for
// opGraph, best first.
func (e *emitter) engineConfigs(opGraph uintptr, name string) []uintptr {
	step := "heuristics of " + name
	heur := e.create(descEngineHeur, step)
	e.setDescs(heur, attrHeurGraph, step, opGraph)
	e.setInt32(heur, attrHeurMode, typeHeurMode, heurModeA, step)
	e.finalize(heur, step)
	if e.err != nil {
		return nil
	}
	n, s := e.l.fns.get(heur, attrHeurResults, typeDescriptor, 0, nil)
	if e.fail("count "+step, s); e.err != nil || n == 0 {
		return nil
	}
	cfgs := make([]uintptr, n)
	for i := range cfgs {
		cfgs[i] = e.create(descEngineCfg, step)
	}
	if e.err != nil {
		return nil
	}
	got, s := e.l.fns.get(heur, attrHeurResults, typeDescriptor, n, unsafe.Pointer(&cfgs[0]))
	e.fail("get "+step, s)
	return cfgs[:min(got, n)]
}

// nondeterministic reports whether the engine of configuration c carries
// cuDNN's nondeterministic numerical note (its results may differ in bits
// from run to run, as sums in a varying order do).
func (e *emitter) nondeterministic(c uintptr) (bool, error) {
	l := e.l
	eng, s := l.fns.createDesc(descEngine)
	if err := l.check("create engine descriptor", s); err != nil {
		return false, err
	}
	defer l.fns.destroyDesc(eng)
	if _, s = l.fns.get(c, attrEngineCfgEngine, typeDescriptor, 1, unsafe.Pointer(&eng)); s != StatusSuccess {
		return false, l.check("engine of an engine config", s)
	}
	var notes [maxNotes]int32
	n, s := l.fns.get(eng, attrEngineNotes, typeNumericalNote, len(notes), unsafe.Pointer(&notes[0]))
	if err := l.check("numerical notes of an engine", s); err != nil {
		return false, err
	}
	return slices.Contains(notes[:min(max(n, 0), len(notes))], noteNondeterministic), nil
}

// tryConfig builds the execution plan of engine configuration c and
// returns it with its workspace size; a plan that does not finalize is
// destroyed and its error returned.
func (p *plan) tryConfig(c uintptr) (exec uintptr, workspace int, err error) {
	l := p.e.l
	exec, s := l.fns.createDesc(descPlan)
	if err := l.check("create execution plan", s); err != nil {
		return 0, 0, err
	}
	h := p.h
	s = l.fns.set(exec, attrPlanHandle, typeHandle, 1, unsafe.Pointer(&h))
	if s == StatusSuccess {
		s = l.fns.set(exec, attrPlanEngineCfg, typeDescriptor, 1, unsafe.Pointer(&c))
	}
	if s == StatusSuccess {
		s = l.fns.finalize(exec)
	}
	var ws int64
	if s == StatusSuccess {
		_, s = l.fns.get(exec, attrPlanWorkspace, typeInt64, 1, unsafe.Pointer(&ws))
	}
	if err := l.check("finalize execution plan", s); err != nil {
		l.fns.destroyDesc(exec)
		return 0, 0, err
	}
	p.e.made = append(p.e.made, exec)
	return exec, int(ws), nil
}

// packOrder lists the non-virtual tensors and makes the host values of
// the by-value ones.
func (p *plan) packOrder() {
	for _, t := range p.g.tensors {
		if t.virtual {
			continue
		}
		p.uids = append(p.uids, t.uid)
		if t.byValue {
			p.scalars[t.uid] = newHostScalar(t.value)
		}
	}
	slices.Sort(p.uids)
}

// run queues the plan on stream with the device pointers ptrs of the
// non-virtual tensors that are not by value, and workspace ws (at least
// p.workspace bytes). It runs on the device's worker thread.
func (p *plan) run(stream uintptr, ptrs map[int64]uintptr, ws uintptr) error {
	l := p.e.l
	addrs := make([]uintptr, len(p.uids))
	for i, u := range p.uids {
		if sc, ok := p.scalars[u]; ok {
			addrs[i] = sc.addr()
			continue
		}
		a, ok := ptrs[u]
		if !ok || a == 0 {
			return fmt.Errorf("cudnn: %s: no buffer for tensor %d", p.g.name, u)
		}
		addrs[i] = a
	}
	pack, s := l.fns.createDesc(descVariantPack)
	if err := l.check("create variant pack", s); err != nil {
		return err
	}
	defer l.fns.destroyDesc(pack)
	uids := slices.Clone(p.uids)
	steps := []func() Status{
		func() Status { return l.fns.set(pack, attrPackUIDs, typeInt64, len(uids), unsafe.Pointer(&uids[0])) },
		func() Status {
			return l.fns.set(pack, attrPackPointers, typeVoidPtr, len(addrs), unsafe.Pointer(&addrs[0]))
		},
		func() Status { return l.fns.set(pack, attrPackWorkspace, typeVoidPtr, 1, unsafe.Pointer(&ws)) },
		func() Status { return l.fns.finalize(pack) },
		func() Status { return l.fns.setStream(p.h, stream) },
		func() Status { return l.fns.execute(p.h, p.exec, pack) },
	}
	for i, step := range steps {
		if err := l.check([]string{"variant pack ids", "variant pack pointers", "variant pack workspace",
			"finalize variant pack", "cudnnSetStream", "cudnnBackendExecute " + p.g.name}[i], step()); err != nil {
			return err
		}
	}
	return nil
}

// destroy releases the plan's descriptors and host values.
func (p *plan) destroy() {
	if p == nil {
		return
	}
	p.e.destroy()
	for _, s := range p.scalars {
		s.free()
	}
	p.scalars = nil
}
