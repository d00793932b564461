package backend_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
)

// A ShardUpdater updates several bucket shards with one call (the GPU
// backend: one kernel launch for all of them); the arguments may differ
// only in each shard's own buffers, sizes and segments (CheckShards). Here
// two shards of one and two elements, without an update rule, fold the
// amax of their masters into one shared slot.
func ExampleShardUpdater() {
	be := cpu.New(1)
	f32 := func(xs ...float32) buffer.Buffer {
		b := make(buffer.HostBuffer, 4*len(xs))
		for i, x := range xs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	amax, scale := make(buffer.HostBuffer, 4), f32(1)
	shard := func(master buffer.Buffer, n int) *backend.UpdateArgs {
		return &backend.UpdateArgs{Rule: optimizer.RuleNone, N: n, Master: master, Amax: amax, Scale: scale,
			Segments: []backend.Segment{{Len: n, Mode: backend.ModeTensorCurrent}}}
	}
	var su backend.ShardUpdater = be
	if err := su.UpdateShards([]*backend.UpdateArgs{shard(f32(0.5), 1), shard(f32(-3, 2), 2)}); err != nil {
		fmt.Println(err)
	}
	fmt.Println("amax of both shards:", math.Float32frombits(binary.LittleEndian.Uint32(amax)))
	other := shard(f32(1), 1)
	other.Scale = f32(2)
	fmt.Println(backend.CheckShards([]*backend.UpdateArgs{shard(f32(1), 1), other}))
	// Output:
	// amax of both shards: 3
	// backend: UpdateShards: shard 1 differs from shard 0 in Scale
}
