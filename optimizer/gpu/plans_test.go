package gpu

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
)

// scheduleValues returns the values of step (from 1) for the shards as
// under a warmup-cosine rate over 6 steps: the rule's scalars, each
// segment's factors (segment j at j+1 times the rate; weight decay on odd
// shards) and backend.MomentSeed's seeds.
func scheduleValues(as []*backend.UpdateArgs, step int) backend.StepValues {
	lr := optimizer.WarmupCosine{Peak: 1e-2, Min: 1e-3, Warmup: 2, Total: 6}.LR(step)
	p := backend.Params{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Momentum: 0.9}
	r := as[0].Rule
	v := backend.StepValues{Hyper: r.Hyper(p, step, 1), Factors: make([][]backend.Factors, len(as)), Seeds: make([]uint32, len(as))}
	for i, a := range as {
		for j := range a.Segments {
			v.Factors[i] = append(v.Factors[i], r.Factors(p, step, lr*float64(j+1), 0.1*float64(i%2)))
		}
		v.Seeds[i] = backend.MomentSeed(step, i)
	}
	return v
}

// TestPlanSetStep checks, without a GPU, the table of a planned update
// over 10 steps of a schedule: packed once, with each step's factors and
// seeds written in place (updatePlan.setStep), it must equal the table
// UpdateShards packs anew from the step's arguments (StepValues.Apply),
// bit for bit, with its static part unchanged; and setStep must report a
// change exactly when the bytes change (the plan copies the table to the
// device only then). Shard 1 has three segments, one of them empty (not
// packed). Under SGD the factors stop changing with the rate after step 6,
// and the seeds are not read.
func TestPlanSetStep(t *testing.T) {
	F32, FP8 := backend.MomentFloat32, backend.MomentFP8
	for _, c := range []struct {
		rule   backend.Rule
		m, v   backend.MomentDType
		steady bool // some step leaves the table as it was
	}{
		{backend.RuleAdamW, FP8, FP8, false},
		{backend.RuleAdamW, F32, F32, false},
		{backend.RuleSGD, FP8, 0, true},
		{backend.RuleNone, F32, F32, true},
	} {
		name := fmt.Sprintf("%v/m=%v/v=%v", c.rule, c.m, c.v)
		as := fakeShards(c.rule, c.m, c.v, 0)
		tc := backend.ModeTensorCurrent
		as[1].Segments = []backend.Segment{{Off: 0, Len: 100, Mode: tc}, {Off: 100, Len: 0, Mode: tc}, {Off: 100, Len: 412, Mode: tc, Slot: 1}}
		tab, err := shardTable(as, fakePtr)
		if err != nil {
			t.Fatal(err)
		}
		p := &updatePlan{as: as, t: tab, seed: readsSeed(as[0])}
		static, last := tab.StaticPart(), slices.Clone(tab.Bytes)
		steady := false
		for step := 1; step <= 10; step++ {
			v := scheduleValues(as, step)
			changed := p.setStep(v)
			applied, err := v.Apply(as)
			if err != nil {
				t.Fatal(err)
			}
			want, err := shardTable(applied, fakePtr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p.t.Bytes, want.Bytes) {
				t.Fatalf("%s: step %d: the planned table with the step's values differs from the table packed anew", name, step)
			}
			if differs := !bytes.Equal(last, want.Bytes); changed != differs {
				t.Errorf("%s: step %d: setStep reports a change: %t; the bytes changed: %t", name, step, changed, differs)
			}
			if !bytes.Equal(p.t.StaticPart(), static) {
				t.Fatalf("%s: step %d: the static part changed", name, step)
			}
			steady = steady || !changed
			last = slices.Clone(want.Bytes)
		}
		if steady != c.steady {
			t.Errorf("%s: some step left the table as it was: %t, want %t", name, steady, c.steady)
		}
	}
}

// TestPlanCopies checks planned updates and casts on the GPU over 8 steps
// of a schedule: after each run the device copy of the update's table
// holds the bytes UpdateShards would pack for the step's arguments, it was
// copied to the device only at the steps whose bytes changed (at each under
// AdamW, whose bias correction moves; under SGD not after the rate stops
// changing), the cast's table was copied once, and no table went into the
// cache of direct calls.
func TestPlanCopies(t *testing.T) {
	b := open(t)
	for _, rule := range []backend.Rule{backend.RuleAdamW, backend.RuleSGD} {
		as, cs := deviceShards(t, b, rule)
		up, err := b.PlanUpdate(as)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := b.PlanCast(cs)
		if err != nil {
			t.Fatal(err)
		}
		p := up.(*updatePlan)
		var last []byte
		wantCopies := 0
		for step := 1; step <= 8; step++ {
			v := scheduleValues(as, step)
			if err := up.Run(v); err != nil {
				t.Fatal(err)
			}
			if err := cp.Run(); err != nil {
				t.Fatal(err)
			}
			applied, err := v.Apply(as)
			if err != nil {
				t.Fatal(err)
			}
			want, err := shardTable(applied, b.ptr)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(want.Bytes))
			if err := b.Read(got, buffer.DeviceBuffer{Ptr: uintptr(p.e.dev), Size: len(got), Device: b.Ordinal()}, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes) {
				t.Fatalf("%v: step %d: the device's table differs from the step's", rule, step)
			}
			if !bytes.Equal(last, want.Bytes) {
				wantCopies++
			}
			last = want.Bytes
			if n := copiesOf(t, b, p.e); n != wantCopies {
				t.Errorf("%v: step %d: %d copies of the update's table, want %d (one per change)", rule, step, n, wantCopies)
			}
		}
		if n := copiesOf(t, b, cp.(*castPlan).e); n != 1 {
			t.Errorf("%v: %d copies of the cast's table over 8 runs, want 1", rule, n)
		}
		if err := b.onWorker(func() error {
			if len(b.tables) != 0 {
				t.Errorf("%v: %d cached tables after planned runs alone", rule, len(b.tables))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := up.Close(); err != nil {
			t.Fatal(err)
		}
		if err := cp.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// copiesOf returns the copies of e to the device so far.
func copiesOf(t *testing.T, b *Backend, e *table) int {
	t.Helper()
	n := 0
	if err := b.onWorker(func() error { n = e.copies; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// deviceShards allocates two shards of 512 elements on b, with float32
// moments and gradients, FP8 bytes of current scaling, and shard 1 in
// two segments: their update and cast arguments.
func deviceShards(t *testing.T, b *Backend, rule backend.Rule) ([]*backend.UpdateArgs, []*backend.CastArgs) {
	t.Helper()
	const n = 512
	alloc := func(size int) buffer.Buffer {
		x, err := b.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free(x) })
		return x
	}
	amax, scale := alloc(8), alloc(8)
	tc := backend.ModeTensorCurrent
	segs := [][]backend.Segment{{{Off: 0, Len: n, Mode: tc}}, {{Off: 0, Len: 200, Mode: tc}, {Off: 200, Len: n - 200, Mode: tc, Slot: 1}}}
	as := make([]*backend.UpdateArgs, 2)
	cs := make([]*backend.CastArgs, 2)
	for k := range as {
		a := &backend.UpdateArgs{Rule: rule, N: n, MomentType: buffer.Float32, GradType: buffer.Float32, MomentBase: n * k,
			Master: alloc(4 * n), M: alloc(4 * n), V: alloc(4 * n), Grad: alloc(4 * n), FP8: alloc(n),
			Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, Amax: amax, Scale: scale, Segments: segs[k]}
		as[k] = a
		cs[k] = &backend.CastArgs{N: n, Master: a.Master, Segments: a.Segments, Format: fp8.E4M3, FP8: a.FP8, Scale: scale}
	}
	return as, cs
}
