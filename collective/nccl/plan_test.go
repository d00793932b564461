package nccl

import (
	"reflect"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/nccl"
)

func dbuf(p uintptr, n int) buffer.DeviceBuffer {
	return buffer.DeviceBuffer{Ptr: p, Size: n, Device: 0}
}

func scratchAt(off int) addr { return addr{p: uintptr(off), scratch: true} }

// TestPlan checks what each kind of op becomes, for rank 1 of 3, against
// plans written out by hand.
func TestPlan(t *testing.T) {
	const src, dst, bar = 0x10000, 0x90000, 0x500
	u := userAddr
	tests := []struct {
		name  string
		exact bool
		ops   []collective.Op
		want  plan
	}{
		{"all-gather", false,
			[]collective.Op{{Kind: collective.OpAllGather, Dst: dbuf(dst, 33), Src: dbuf(src, 11)}},
			plan{calls: []call{{kind: collAllGather, send: u(src), recv: u(dst), count: 11, dt: nccl.Uint8}}}},
		{"all-gather in place, empty ops skipped", false,
			[]collective.Op{
				{Kind: collective.OpAllGather, Dst: dbuf(dst, 0), Src: dbuf(dst, 0)},
				{Kind: collective.OpAllGather, Dst: dbuf(dst, 30), Src: dbuf(dst+10, 10)},
				{Kind: collective.OpReduceScatter, Dst: dbuf(dst, 0), Src: dbuf(src, 0), DType: buffer.Float32, Reduce: collective.Max},
				{Kind: collective.OpBroadcast, Dst: dbuf(dst, 0), Root: 2},
			},
			plan{calls: []call{{kind: collAllGather, send: u(dst + 10), recv: u(dst), count: 10, dt: nccl.Uint8}}}},
		{"broadcast and barriers collapse", false,
			[]collective.Op{{Kind: collective.OpBarrier}, {Kind: collective.OpBroadcast, Dst: dbuf(dst, 7), Root: 2}, {Kind: collective.OpBarrier}},
			plan{calls: []call{
				{kind: collBroadcast, send: u(dst), recv: u(dst), count: 7, dt: nccl.Uint8, root: 2},
				{kind: collAllReduce, send: u(bar), recv: u(bar), count: 1, dt: nccl.Uint32, op: nccl.Sum},
			}}},
		{"integer max and float sum are direct", false,
			[]collective.Op{
				{Kind: collective.OpReduceScatter, Dst: dbuf(dst, 40), Src: dbuf(src, 120), DType: buffer.Int64, Reduce: collective.Max},
				{Kind: collective.OpAllReduce, Dst: dbuf(dst, 6), Src: dbuf(src, 6), DType: buffer.BFloat16, Reduce: collective.Sum},
				{Kind: collective.OpAllReduce, Dst: dbuf(dst, 5), Src: dbuf(dst, 5), DType: buffer.Uint8, Reduce: collective.Sum},
			},
			plan{calls: []call{
				{kind: collReduceScatter, send: u(src), recv: u(dst), count: 5, dt: nccl.Int64, op: nccl.Max},
				{kind: collAllReduce, send: u(src), recv: u(dst), count: 3, dt: nccl.BFloat16, op: nccl.Sum},
				{kind: collAllReduce, send: u(dst), recv: u(dst), count: 5, dt: nccl.Uint8, op: nccl.Sum},
			}}},
		{"all-to-all as grouped send and recv", false,
			[]collective.Op{{Kind: collective.OpAllToAll, Dst: dbuf(dst, 12), Src: dbuf(src, 12)}},
			plan{calls: []call{
				{kind: collSend, send: u(src), count: 4, dt: nccl.Uint8, root: 0},
				{kind: collRecv, recv: u(dst), count: 4, dt: nccl.Uint8, root: 0},
				{kind: collSend, send: u(src + 4), count: 4, dt: nccl.Uint8, root: 1},
				{kind: collRecv, recv: u(dst + 4), count: 4, dt: nccl.Uint8, root: 1},
				{kind: collSend, send: u(src + 8), count: 4, dt: nccl.Uint8, root: 2},
				{kind: collRecv, recv: u(dst + 8), count: 4, dt: nccl.Uint8, root: 2},
			}}},
		{"native avg", false,
			[]collective.Op{{Kind: collective.OpReduceScatter, Dst: dbuf(dst, 8), Src: dbuf(src, 24), DType: buffer.BFloat16, Reduce: collective.Avg}},
			plan{calls: []call{{kind: collReduceScatter, send: u(src), recv: u(dst), count: 4, dt: nccl.BFloat16, op: nccl.Avg}}}},
		{"float max through keys", true,
			[]collective.Op{
				{Kind: collective.OpReduceScatter, Dst: dbuf(dst, 10), Src: dbuf(src, 30), DType: buffer.BFloat16, Reduce: collective.Max},
				{Kind: collective.OpAllReduce, Dst: dbuf(dst, 16), Src: dbuf(dst, 16), DType: buffer.Float64, Reduce: collective.Max},
			},
			plan{
				pre: []launch{
					{k: kKeyBF16, dst: scratchAt(0), src: u(src), n: 15},
					{k: kKeyF64, dst: scratchAt(256), src: u(dst), n: 2},
				},
				calls: []call{
					{kind: collReduceScatter, send: scratchAt(0), recv: scratchAt(20), count: 5, dt: nccl.Uint32, op: nccl.Max},
					{kind: collAllReduce, send: scratchAt(256), recv: scratchAt(256), count: 2, dt: nccl.Uint64, op: nccl.Max},
				},
				post: []launch{
					{k: kUnkeyBF16, dst: u(dst), src: scratchAt(20), n: 5},
					{k: kUnkeyF64, dst: u(dst), src: scratchAt(256), n: 2},
				},
				scratch: 512,
			}},
		{"exact avg", true,
			[]collective.Op{
				{Kind: collective.OpReduceScatter, Dst: dbuf(src+600, 200), Src: dbuf(src, 600), DType: buffer.BFloat16, Reduce: collective.Avg},
				{Kind: collective.OpAllReduce, Dst: dbuf(dst, 12), Src: dbuf(src, 12), DType: buffer.Float32, Reduce: collective.Avg},
				{Kind: collective.OpReduceScatter, Dst: dbuf(dst, 8), Src: dbuf(src, 24), DType: buffer.Float64, Reduce: collective.Avg},
			},
			plan{
				pre: []launch{{k: kWidenBF16, dst: scratchAt(0), src: u(src), n: 300}},
				calls: []call{
					{kind: collReduceScatter, send: scratchAt(0), recv: scratchAt(400), count: 100, dt: nccl.Float32, op: nccl.Sum},
					{kind: collAllReduce, send: u(src), recv: u(dst), count: 3, dt: nccl.Float32, op: nccl.Sum},
					{kind: collReduceScatter, send: u(src), recv: u(dst), count: 1, dt: nccl.Float64, op: nccl.Sum},
				},
				post: []launch{
					{k: kDivBF16, dst: u(src + 600), src: scratchAt(400), n: 100, divisor: 3},
					{k: kDivF32, dst: u(dst), n: 3, divisor: 3},
					{k: kDivF64, dst: u(dst), n: 1, divisor: 3},
				},
				scratch: 1280,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, op := range tt.ops {
				if err := op.Validate(3, buffer.Device); err != nil {
					t.Fatalf("test op invalid: %v", err)
				}
			}
			pl := planner{rank: 1, size: 3, exactAvg: tt.exact, barrier: bar}
			got := pl.plan(tt.ops)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("plan:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestAddrResolve(t *testing.T) {
	if got := userAddr(0x1000).add(8).resolve(0x9000); got != 0x1008 {
		t.Errorf("user address resolved to %#x", got)
	}
	if got := scratchAt(256).add(8).resolve(0x9000); got != 0x9108 {
		t.Errorf("scratch address resolved to %#x", got)
	}
}

// TestPlanOneRank checks that on one rank an in-place reduction or
// all-gather plans nothing (its result is its input), whatever the type and
// operation, and that one out of place still copies through NCCL; with
// Config.OneRankCopies (oneRankNoop unset) in place runs through NCCL too.
func TestPlanOneRank(t *testing.T) {
	const src, dst = 0x10000, 0x90000
	pl := planner{rank: 0, size: 1, exactAvg: true, barrier: 0x500, oneRankNoop: true}
	copies := planner{rank: 0, size: 1, exactAvg: true, barrier: 0x500}
	if p := copies.plan([]collective.Op{{Kind: collective.OpAllGather, Dst: dbuf(dst, 64), Src: dbuf(dst, 64)},
		{Kind: collective.OpAllReduce, Dst: dbuf(dst, 64), Src: dbuf(dst, 64), DType: buffer.Float32, Reduce: collective.Sum}}); len(p.calls) != 2 {
		t.Errorf("in place on one rank with OneRankCopies: plan %+v, want two NCCL calls", p)
	}
	ag := collective.Op{Kind: collective.OpAllGather, Dst: dbuf(dst, 64), Src: dbuf(dst, 64)}
	if p := pl.plan([]collective.Op{ag}); !p.empty() {
		t.Errorf("all-gather in place on one rank: plan %+v, want nothing", p)
	}
	ag.Src = dbuf(src, 64)
	if p := pl.plan([]collective.Op{ag}); len(p.calls) != 1 {
		t.Errorf("all-gather out of place on one rank: plan %+v, want one NCCL call", p)
	}
	for _, dt := range []buffer.DType{buffer.BFloat16, buffer.Float32, buffer.Float64, buffer.Int64} {
		for _, r := range []collective.ReduceOp{collective.Sum, collective.Avg, collective.Max} {
			if dt == buffer.Int64 && r == collective.Avg {
				continue
			}
			for _, k := range []collective.OpKind{collective.OpReduceScatter, collective.OpAllReduce} {
				op := collective.Op{Kind: k, Dst: dbuf(dst, 8*dt.Size()), Src: dbuf(dst, 8*dt.Size()), DType: dt, Reduce: r}
				if err := op.Validate(1, buffer.Device); err != nil {
					t.Fatalf("test op invalid: %v", err)
				}
				if p := pl.plan([]collective.Op{op}); !p.empty() {
					t.Errorf("%v %v %v in place on one rank: plan %+v, want nothing", k, dt, r, p)
				}
				op.Src = dbuf(src, 8*dt.Size())
				if p := pl.plan([]collective.Op{op}); len(p.calls) != 1 {
					t.Errorf("%v %v %v out of place on one rank: plan %+v, want one NCCL call", k, dt, r, p)
				}
			}
		}
	}
}
