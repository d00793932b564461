package backend_test

import (
	"strings"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// TestCheckShards checks what UpdateShards and CastShards refuse: no
// shards, shards that differ in a scalar or in the launch's buffers, a
// shard with both FP8 bytes and a high-precision copy, high-precision
// copies of two types; and that shards differing only in their own
// buffers, sizes, segments, seeds and positions pass.
func TestCheckShards(t *testing.T) {
	buf := func(n int) buffer.Buffer { return make(buffer.HostBuffer, n) }
	amax, scale := buf(8), buf(8)
	shard := func(n int) *backend.UpdateArgs {
		return &backend.UpdateArgs{Rule: backend.RuleAdamW, Hyper: backend.Hyper{Beta1: 0.9}, N: n,
			Master: buf(4 * n), M: buf(4 * n), V: buf(4 * n), Grad: buf(2 * n), FP8: buf(n),
			GradType: buffer.BFloat16, MomentType: buffer.Float32, Amax: amax, Scale: scale,
			Segments: []backend.Segment{{Len: n, Mode: backend.ModeTensorCurrent}}, MomentSeed: uint32(n), MomentBase: n}
	}
	ok := []*backend.UpdateArgs{shard(4), shard(8), shard(12)}
	ok[2].FP8, ok[2].HP, ok[2].HPType = nil, buf(24), buffer.BFloat16
	if err := backend.CheckShards(ok); err != nil {
		t.Errorf("shards alike: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(a *backend.UpdateArgs)
	}{
		{"hyper", "Hyper", func(a *backend.UpdateArgs) { a.Hyper.Beta1 = 0.8 }},
		{"rule", "Rule", func(a *backend.UpdateArgs) { a.Rule = backend.RuleSGD }},
		{"amax buffer", "Amax", func(a *backend.UpdateArgs) { a.Amax = buf(8) }},
		{"grad type", "GradType", func(a *backend.UpdateArgs) { a.GradType = buffer.Float32 }},
		{"both outputs", "both FP8 bytes and a high-precision copy", func(a *backend.UpdateArgs) { a.HP = buf(16) }},
	} {
		as := []*backend.UpdateArgs{shard(4), shard(8)}
		tc.edit(as[1])
		err := backend.CheckShards(as)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "shard 1") {
			t.Errorf("%s: error %v, want one naming shard 1 and %q", tc.name, err, tc.want)
		}
	}
	two := []*backend.UpdateArgs{shard(4), shard(8)}
	for i, dt := range []buffer.DType{buffer.BFloat16, buffer.Float32} {
		two[i].FP8, two[i].HP, two[i].HPType = nil, buf(32), dt
	}
	if err := backend.CheckShards(two); err == nil || !strings.Contains(err.Error(), "HPType") {
		t.Errorf("copies of two types: error %v, want one naming HPType", err)
	}
	two[0].HPType = 0 // no type given, then bfloat16: two types too
	if err := backend.CheckShards(two); err == nil || !strings.Contains(err.Error(), "HPType") {
		t.Errorf("copies of no type and bfloat16: error %v, want one naming HPType", err)
	}
	if err := backend.CheckShards(nil); err == nil {
		t.Error("no shards: no error")
	}
	c := func(n int) *backend.CastArgs {
		return &backend.CastArgs{N: n, Master: buf(4 * n), FP8: buf(n), Scale: scale}
	}
	if err := backend.CheckCastShards([]*backend.CastArgs{c(4), c(8)}); err != nil {
		t.Errorf("casts alike: %v", err)
	}
	other := c(8)
	other.Scale = buf(8)
	if err := backend.CheckCastShards([]*backend.CastArgs{c(4), other}); err == nil || !strings.Contains(err.Error(), "Scale") {
		t.Errorf("casts with other scales: error %v, want one naming Scale", err)
	}
}

// TestStepValuesApply checks what a planned update runs: copies of the
// planned arguments with the step's scalars, each segment's factors and
// each shard's seed, the planned ones untouched; and values that do not
// fit the plan refused.
func TestStepValuesApply(t *testing.T) {
	seg := func(off int) backend.Segment {
		return backend.Segment{Off: off, Len: 8, Mode: backend.ModeTensorCurrent, Slot: off}
	}
	as := []*backend.UpdateArgs{
		{Rule: backend.RuleAdamW, N: 16, Segments: []backend.Segment{seg(0), seg(8)}, MomentBase: 4},
		{Rule: backend.RuleAdamW, N: 8, Segments: []backend.Segment{seg(0)}, MomentBase: 20},
	}
	f := func(x float32) backend.Factors { return backend.Factors{StepSize: x, Shrink: 1 - x} }
	v := backend.StepValues{Hyper: backend.Hyper{GradScale: 0.5, SqrtVCorrection: 3},
		Factors: [][]backend.Factors{{f(1), f(2)}, {f(3)}}, Seeds: []uint32{7, 9}}
	got, err := v.Apply(as)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range got {
		if a.Hyper != v.Hyper || a.MomentSeed != v.Seeds[i] || a.MomentBase != as[i].MomentBase || a.N != as[i].N {
			t.Errorf("shard %d: %+v", i, a)
		}
		for j, s := range a.Segments {
			want := as[i].Segments[j]
			want.Factors = v.Factors[i][j]
			if s != want {
				t.Errorf("shard %d, segment %d: %+v, want %+v", i, j, s, want)
			}
			if as[i].Segments[j].Factors != (backend.Factors{}) {
				t.Errorf("shard %d, segment %d: the planned segment was changed", i, j)
			}
		}
	}
	for _, bad := range []backend.StepValues{
		{Factors: v.Factors[:1], Seeds: v.Seeds},
		{Factors: v.Factors, Seeds: v.Seeds[:1]},
		{Factors: [][]backend.Factors{{f(1)}, {f(3)}}, Seeds: v.Seeds},
	} {
		if _, err := bad.Apply(as); err == nil {
			t.Errorf("values %+v for 2 shards of 2 and 1 segments: no error", bad)
		}
	}
}
