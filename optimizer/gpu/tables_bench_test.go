package gpu

import (
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/optimizer/backend"
)

// BenchmarkHostTable times, on the host alone (no GPU), what a one-launch
// update does before its launch for a GPT-shaped model (25 shards of 12
// segments). A direct UpdateShards call: shardTable packs the segment
// table; key is the cache lookup by static part (StaticPart, a string of
// it, a map lookup); same is the check that finds the kind's last table
// without a key (kernels.Table.SameStatic). A planned step (setStep) only
// writes its factors and seeds into the table packed once.
func BenchmarkHostTable(b *testing.B) {
	var as []*backend.UpdateArgs
	for k := range 25 {
		a := &backend.UpdateArgs{Rule: backend.RuleAdamW, N: 12 << 20}
		for i := range 12 {
			a.Segments = append(a.Segments, backend.Segment{Off: i << 20, Len: 1 << 20, Mode: backend.ModeTensorCurrent,
				Slot: k*12 + i, Factors: backend.Factors{StepSize: 1e-4, Shrink: 0.99}})
		}
		as = append(as, a)
	}
	ptr := func(buffer.Buffer) cuda.DevicePtr { return 0x1000 }
	b.Run("shardTable", func(b *testing.B) {
		for b.Loop() {
			if _, err := shardTable(as, ptr); err != nil {
				b.Fatal(err)
			}
		}
	})
	t, err := shardTable(as, ptr)
	if err != nil {
		b.Fatal(err)
	}
	last := append([]byte(nil), t.Bytes...)
	b.Run("key", func(b *testing.B) {
		m := map[string]int{"U" + string(t.StaticPart()): 1}
		for b.Loop() {
			if m["U"+string(t.StaticPart())] != 1 {
				b.Fatal("not found")
			}
		}
	})
	b.Run("same", func(b *testing.B) {
		for b.Loop() {
			if !t.SameStatic(last) {
				b.Fatal("not the same")
			}
		}
	})
	b.Run("setStep", func(b *testing.B) {
		p := &updatePlan{as: as, t: t}
		v := scheduleValues(as, 1)
		for b.Loop() {
			p.setStep(v)
		}
	})
}
