package collectivetest

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// testCase is one check, run by every rank of a group.
type testCase struct {
	name string
	run  func(e *env) error
}

var (
	dtypes = []buffer.DType{buffer.Uint8, buffer.BFloat16, buffer.Float32,
		buffer.Float64, buffer.Uint32, buffer.Int64}
	reductions = []collective.ReduceOp{collective.Sum, collective.Avg, collective.Max}
	// Element counts (per rank for reduce-scatter), and byte counts of
	// gathers: empty, one, primes, odd.
	smallCounts = []int{0, 1, 2, 7, 61, 1031}
	gatherSizes = []int{0, 1, 3, 8, 13, 1021, 65537}
)

// cases lists the checks for a world of n ranks, in the order every rank
// runs them. It is long because it is the suite's table: one short closure
// per check, kept in one list so that the order all ranks share is visible
// in one place.
func cases(n int, o Options) []testCase {
	var cs []testCase
	add := func(name string, run func(e *env) error) { cs = append(cs, testCase{name, run}) }
	for _, inPlace := range []bool{false, true} {
		add(variant("all-gather", inPlace), func(e *env) error {
			for _, m := range gatherSizes {
				if err := e.allGather(m, inPlace); err != nil {
					return fmt.Errorf("%d bytes per rank: %w", m, err)
				}
			}
			return nil
		})
		add(variant("all-gather/large", inPlace), func(e *env) error {
			return e.allGather(2*o.LargeBytes/n+5, inPlace)
		})
	}
	add("all-to-all", func(e *env) error {
		for _, m := range gatherSizes {
			if err := e.checked(collective.OpAllToAll, 0, 0, m, 0); err != nil {
				return fmt.Errorf("%d bytes per block: %w", m, err)
			}
		}
		return nil
	})
	add("all-to-all/large", func(e *env) error {
		return e.checked(collective.OpAllToAll, 0, 0, o.LargeBytes/n+5, 0)
	})
	reduceCases(n, o, add)
	for root := range n {
		add(fmt.Sprintf("broadcast/root=%d", root), func(e *env) error {
			for _, m := range []int{0, 1, 1021, o.LargeBytes + 5} {
				if err := e.broadcast(root, m); err != nil {
					return fmt.Errorf("%d bytes: %w", m, err)
				}
			}
			return nil
		})
	}
	add("barrier", (*env).barriers)
	add("group", (*env).group)
	add("in-flight", (*env).inFlight)
	add("invalid", (*env).invalid)
	return cs
}

// reduceCases adds the reduce-scatter and all-reduce cases: every dtype
// and reduction at small sizes, with specials for the float types, and a
// few large ones.
func reduceCases(n int, o Options, add func(name string, run func(e *env) error)) {
	for _, kind := range []collective.OpKind{collective.OpReduceScatter, collective.OpAllReduce} {
		for _, dt := range dtypes {
			for _, red := range reductions {
				if red == collective.Avg && !isFloat(dt) {
					continue
				}
				name := fmt.Sprintf("%s/%s/%s", kind, dt, red)
				add(name, func(e *env) error {
					for _, count := range smallCounts {
						for _, inPlace := range []bool{false, true} {
							if err := e.reduce(kind, dt, red, count, inPlace, false); err != nil {
								return fmt.Errorf("%s of %d elements: %w", variant("", inPlace), count, err)
							}
						}
					}
					return nil
				})
				if isFloat(dt) {
					add(name+"/specials", func(e *env) error {
						for _, inPlace := range []bool{false, true} {
							if err := e.reduce(kind, dt, red, 509, inPlace, true); err != nil {
								return fmt.Errorf("%s: %w", variant("", inPlace), err)
							}
						}
						return nil
					})
				}
			}
		}
		for _, l := range []struct {
			dt      buffer.DType
			red     collective.ReduceOp
			inPlace bool
		}{
			{buffer.Float32, collective.Sum, false},
			{buffer.Float32, collective.Sum, true},
			{buffer.BFloat16, collective.Avg, false},
			{buffer.Float64, collective.Max, true},
			{buffer.Uint8, collective.Sum, false},
		} {
			count := o.LargeBytes/l.dt.Size() + 3
			if kind == collective.OpReduceScatter {
				count = o.LargeBytes/l.dt.Size()/n + 3
			}
			add(variant(fmt.Sprintf("%s/%s/%s/large", kind, l.dt, l.red), l.inPlace), func(e *env) error {
				return e.reduce(kind, l.dt, l.red, count, l.inPlace, true)
			})
		}
	}
}

func variant(name string, inPlace bool) string {
	if inPlace {
		return name + "/in-place"
	}
	if name == "" {
		return "out of place"
	}
	return name
}

// pattern returns n bytes that no correct op leaves in an output.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = guardByte(i + 3)
	}
	return b
}

// allGather checks an all-gather of m bytes per rank.
func (e *env) allGather(m int, inPlace bool) error {
	in := e.inputs("all-gather", m, buffer.Uint8, false)
	dst, err := e.alloc(e.n * m)
	if err != nil {
		return err
	}
	var src *gbuf
	srcView := dst.sub(e.r*m, (e.r+1)*m)
	init := pattern(e.n * m)
	if inPlace {
		copy(init[e.r*m:], in[e.r])
	} else {
		if src, err = e.alloc(m); err != nil {
			return err
		}
		if err := src.set(in[e.r]); err != nil {
			return err
		}
		srcView = src.view
	}
	if err := dst.set(init); err != nil {
		return err
	}
	if err := e.do(collective.Op{Kind: collective.OpAllGather, Dst: dst.view, Src: srcView}); err != nil {
		return err
	}
	got, err := dst.get()
	if err != nil {
		return err
	}
	for s := range e.n {
		if err := compare(got[s*m:(s+1)*m], in[s], buffer.Uint8); err != nil {
			return fmt.Errorf("slice of rank %d: %w", s, err)
		}
	}
	if src != nil {
		return src.expectUnchanged(in[e.r])
	}
	return nil
}

// reduce checks a reduce-scatter (count elements per rank) or an
// all-reduce (count elements) against collective.Reduce.
func (e *env) reduce(kind collective.OpKind, dt buffer.DType, red collective.ReduceOp, count int, inPlace, specials bool) error {
	total := count
	if kind == collective.OpReduceScatter {
		total = e.n * count
	}
	name := fmt.Sprintf("%s/%s", kind, red)
	in := e.inputs(name, total, dt, specials)
	cb := count * dt.Size()
	lo, hi := 0, cb
	if kind == collective.OpReduceScatter {
		lo, hi = e.r*cb, (e.r+1)*cb
	}
	want := e.expected(fmt.Sprintf("%s/%d/%s/%v", name, total, dt, specials), in, lo, hi, dt, red)

	src, err := e.alloc(total * dt.Size())
	if err != nil {
		return err
	}
	if err := src.set(in[e.r]); err != nil {
		return err
	}
	op := collective.Op{Kind: kind, Src: src.view, DType: dt, Reduce: red}
	var got []byte
	if inPlace {
		op.Dst = src.sub(lo, hi)
		if err := e.do(op); err != nil {
			return err
		}
		all, err := src.get()
		if err != nil {
			return err
		}
		got = all[lo:hi]
	} else {
		dst, err := e.alloc(cb)
		if err != nil {
			return err
		}
		if err := dst.set(pattern(cb)); err != nil {
			return err
		}
		op.Dst = dst.view
		if err := e.do(op); err != nil {
			return err
		}
		if got, err = dst.get(); err != nil {
			return err
		}
		if err := src.expectUnchanged(in[e.r]); err != nil {
			return err
		}
	}
	return compare(got, want, dt)
}

// broadcast checks a broadcast of m bytes from root.
func (e *env) broadcast(root, m int) error {
	in := e.inputs(fmt.Sprintf("broadcast/%d", root), m, buffer.Uint8, false)
	buf, err := e.alloc(m)
	if err != nil {
		return err
	}
	init := pattern(m)
	if e.r == root {
		init = in[root]
	}
	if err := buf.set(init); err != nil {
		return err
	}
	if err := e.do(collective.Op{Kind: collective.OpBroadcast, Dst: buf.view, Root: root}); err != nil {
		return err
	}
	got, err := buf.get()
	if err != nil {
		return err
	}
	return compare(got, in[root], buffer.Uint8)
}

// barriers checks that no rank leaves a barrier before every rank entered
// it (in Run, through a counter the ranks share).
func (e *env) barriers() error {
	for k := 1; k <= 3; k++ {
		if e.counter != nil {
			e.counter.Add(1)
		}
		if err := e.do(collective.Op{Kind: collective.OpBarrier}); err != nil {
			return err
		}
		if e.counter != nil {
			if c := e.counter.Load(); c < int64(k*e.n) {
				return fmt.Errorf("barrier %d passed after %d of %d arrivals", k, c, k*e.n)
			}
		}
	}
	// Every rank reads the counter before any adds to it in another case.
	return e.do(collective.Op{Kind: collective.OpBarrier})
}

// opCheck is a started op whose result is checked after the Wait.
type opCheck struct {
	op    collective.Op
	check func() error
}

// prepared sets up a reduction or gather whose outcome check verifies.
func (e *env) prepared(kind collective.OpKind, dt buffer.DType, red collective.ReduceOp, count, root int) (opCheck, error) {
	name := fmt.Sprintf("prepared/%s/%s/%d/%d", kind, red, root, len(e.bufs))
	switch kind {
	case collective.OpAllGather:
		in := e.inputs(name, count, buffer.Uint8, false)
		dst, err := e.alloc(e.n * count)
		if err != nil {
			return opCheck{}, err
		}
		src, err := e.alloc(count)
		if err != nil {
			return opCheck{}, err
		}
		if err := src.set(in[e.r]); err != nil {
			return opCheck{}, err
		}
		var want []byte
		for _, b := range in {
			want = append(want, b...)
		}
		return opCheck{collective.Op{Kind: kind, Dst: dst.view, Src: src.view}, func() error {
			got, err := dst.get()
			if err != nil {
				return err
			}
			return compare(got, want, buffer.Uint8)
		}}, nil
	case collective.OpBroadcast:
		in := e.inputs(name, count, buffer.Uint8, false)
		buf, err := e.alloc(count)
		if err != nil {
			return opCheck{}, err
		}
		if e.r == root {
			err = buf.set(in[root])
		}
		return opCheck{collective.Op{Kind: kind, Dst: buf.view, Root: root}, func() error {
			got, err := buf.get()
			if err != nil {
				return err
			}
			return compare(got, in[root], buffer.Uint8)
		}}, err
	case collective.OpBarrier:
		return opCheck{collective.Op{Kind: kind}, func() error { return nil }}, nil
	case collective.OpAllToAll:
		return e.preparedAllToAll(name, count)
	}
	total := count
	lo, hi := 0, count*dt.Size()
	if kind == collective.OpReduceScatter {
		total = e.n * count
		lo, hi = e.r*hi, (e.r+1)*hi
	}
	in := e.inputs(name, total, dt, true)
	want := e.expected(fmt.Sprintf("%s/%d/%s", name, total, dt), in, lo, hi, dt, red)
	src, err := e.alloc(total * dt.Size())
	if err != nil {
		return opCheck{}, err
	}
	dst, err := e.alloc(hi - lo)
	if err != nil {
		return opCheck{}, err
	}
	if err := src.set(in[e.r]); err != nil {
		return opCheck{}, err
	}
	return opCheck{collective.Op{Kind: kind, Dst: dst.view, Src: src.view, DType: dt, Reduce: red}, func() error {
		got, err := dst.get()
		if err != nil {
			return err
		}
		return compare(got, want, dt)
	}}, nil
}

// groupOps prepares one op of every kind.
func (e *env) groupOps() ([]opCheck, error) {
	specs := []struct {
		kind  collective.OpKind
		dt    buffer.DType
		red   collective.ReduceOp
		count int
		root  int
	}{
		{collective.OpAllGather, 0, 0, 37, 0},
		{collective.OpReduceScatter, buffer.Float32, collective.Sum, 53, 0},
		{collective.OpAllReduce, buffer.Uint32, collective.Max, 17, 0},
		{collective.OpBroadcast, 0, 0, 101, e.n - 1},
		{collective.OpBarrier, 0, 0, 0, 0},
		{collective.OpAllReduce, buffer.BFloat16, collective.Avg, 129, 0},
		{collective.OpReduceScatter, buffer.Int64, collective.Sum, 5, 0},
		{collective.OpAllToAll, 0, 0, 23, 0},
	}
	var out []opCheck
	for _, s := range specs {
		oc, err := e.prepared(s.kind, s.dt, s.red, s.count, s.root)
		if err != nil {
			return nil, err
		}
		out = append(out, oc)
	}
	return out, nil
}

// group starts one op of every kind as a single group.
func (e *env) group() error {
	checks, err := e.groupOps()
	if err != nil {
		return err
	}
	ops := make([]collective.Op, len(checks))
	for i, c := range checks {
		ops[i] = c.op
	}
	if err := e.do(ops...); err != nil {
		return err
	}
	for i, c := range checks {
		if err := c.check(); err != nil {
			return fmt.Errorf("op %d (%s): %w", i, c.op.Kind, err)
		}
	}
	return nil
}

// inFlight starts several groups before waiting for any, waits for them in
// reverse order, and waits twice.
func (e *env) inFlight() error {
	checks, err := e.groupOps()
	if err != nil {
		return err
	}
	works := make([]collective.Work, len(checks))
	for i, c := range checks {
		works[i] = e.c.Start(c.op)
	}
	for i := len(works) - 1; i >= 0; i-- {
		if err := works[i].Wait(e.ctx); err != nil {
			return fmt.Errorf("op %d (%s): %w", i, checks[i].op.Kind, err)
		}
	}
	for i, c := range checks {
		if err := works[i].Wait(e.ctx); err != nil {
			return fmt.Errorf("second Wait of op %d: %w", i, err)
		}
		if err := c.check(); err != nil {
			return fmt.Errorf("op %d (%s): %w", i, c.op.Kind, err)
		}
	}
	return nil
}

// invalid checks that invalid groups fail at once with ErrInvalid or
// ErrMemoryKind, and take no place in the op sequence: a valid group
// started afterwards still meets the other ranks' one.
func (e *env) invalid() error {
	b4, err := e.alloc(4)
	if err != nil {
		return err
	}
	b6, err := e.alloc(6)
	if err != nil {
		return err
	}
	b8, err := e.alloc(8)
	if err != nil {
		return err
	}
	big, err := e.alloc(4*e.n + 4)
	if err != nil {
		return err
	}
	a2aBuf, err := e.alloc(4 * e.n)
	if err != nil {
		return err
	}
	var foreign buffer.Buffer = buffer.DeviceBuffer{Size: 4}
	if e.c.Memory() != buffer.Host {
		foreign = make(buffer.HostBuffer, 4)
	}
	ag, ar := collective.OpAllGather, collective.OpAllReduce
	rs, a2a := collective.OpReduceScatter, collective.OpAllToAll
	f32, sum := buffer.Float32, collective.Sum
	tests := []struct {
		name string
		ops  []collective.Op
		want error
	}{
		{"nil dst", []collective.Op{{Kind: ag, Src: b4.view}}, collective.ErrInvalid},
		{"nil src", []collective.Op{{Kind: ar, Dst: b4.view, DType: f32, Reduce: sum}}, collective.ErrInvalid},
		{"gather dst size", []collective.Op{{Kind: ag, Dst: big.view, Src: b4.view}}, collective.ErrInvalid},
		{"scatter src size", []collective.Op{{Kind: rs, Dst: b4.view, Src: big.view, DType: f32, Reduce: sum}}, collective.ErrInvalid},
		{"avg of uint32", []collective.Op{{Kind: ar, Dst: b4.view, Src: b4.view, DType: buffer.Uint32, Reduce: collective.Avg}}, collective.ErrInvalid},
		{"avg of uint8", []collective.Op{{Kind: ar, Dst: b4.view, Src: b4.view, DType: buffer.Uint8, Reduce: collective.Avg}}, collective.ErrInvalid},
		{"sizes differ", []collective.Op{{Kind: ar, Dst: b4.view, Src: b8.view, DType: f32, Reduce: sum}}, collective.ErrInvalid},
		{"partial element", []collective.Op{{Kind: ar, Dst: b6.view, Src: b6.view, DType: f32, Reduce: sum}}, collective.ErrInvalid},
		{"unknown dtype", []collective.Op{{Kind: ar, Dst: b4.view, Src: b4.view, DType: 0, Reduce: sum}}, collective.ErrInvalid},
		{"unknown reduction", []collective.Op{{Kind: ar, Dst: b4.view, Src: b4.view, DType: f32, Reduce: 0}}, collective.ErrInvalid},
		{"root too large", []collective.Op{{Kind: collective.OpBroadcast, Dst: b4.view, Root: e.n}}, collective.ErrInvalid},
		{"negative root", []collective.Op{{Kind: collective.OpBroadcast, Dst: b4.view, Root: -1}}, collective.ErrInvalid},
		{"all-to-all sizes differ", []collective.Op{{Kind: a2a, Dst: a2aBuf.sub(0, 2*e.n), Src: a2aBuf.sub(2*e.n, 4*e.n-1)}}, collective.ErrInvalid},
		{"all-to-all overlap", []collective.Op{{Kind: a2a, Dst: a2aBuf.sub(0, 2*e.n), Src: a2aBuf.sub(1, 2*e.n+1)}}, collective.ErrInvalid},
		{"unknown kind", []collective.Op{{Kind: 0}}, collective.ErrInvalid},
		{"memory kind", []collective.Op{{Kind: ar, Dst: foreign, Src: foreign, DType: f32, Reduce: sum}}, collective.ErrMemoryKind},
		{"valid then invalid", []collective.Op{{Kind: collective.OpBarrier}, {Kind: 99}}, collective.ErrInvalid},
	}
	for _, tc := range tests {
		err := e.c.Start(tc.ops...).Wait(e.ctx)
		if !errors.Is(err, tc.want) {
			return fmt.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	// The sequence is intact: a checked all-reduce meets the other ranks'.
	oc, err := e.prepared(collective.OpAllReduce, buffer.Float32, collective.Sum, 3, 0)
	if err != nil {
		return err
	}
	if err := e.do(oc.op); err != nil {
		return fmt.Errorf("valid op after invalid ones: %w", err)
	}
	return oc.check()
}

// preparedAllToAll sets up an all-to-all of count bytes per block.
func (e *env) preparedAllToAll(name string, count int) (opCheck, error) {
	in := e.inputs(name, e.n*count, buffer.Uint8, false)
	dst, err := e.alloc(e.n * count)
	if err != nil {
		return opCheck{}, err
	}
	if err := dst.set(pattern(e.n * count)); err != nil {
		return opCheck{}, err
	}
	src, err := e.alloc(e.n * count)
	if err != nil {
		return opCheck{}, err
	}
	if err := src.set(in[e.r]); err != nil {
		return opCheck{}, err
	}
	var want []byte
	for _, b := range in {
		want = append(want, b[e.r*count:(e.r+1)*count]...)
	}
	return opCheck{collective.Op{Kind: collective.OpAllToAll, Dst: dst.view, Src: src.view}, func() error {
		got, err := dst.get()
		if err != nil {
			return err
		}
		if err := compare(got, want, buffer.Uint8); err != nil {
			return err
		}
		// The source is left as it was.
		got, err = src.get()
		if err != nil {
			return err
		}
		return compare(got, in[e.r], buffer.Uint8)
	}}, nil
}

// checked runs one prepared op and checks its outcome.
func (e *env) checked(kind collective.OpKind, dt buffer.DType, red collective.ReduceOp, count, root int) error {
	oc, err := e.prepared(kind, dt, red, count, root)
	if err != nil {
		return err
	}
	if err := e.do(oc.op); err != nil {
		return err
	}
	return oc.check()
}
