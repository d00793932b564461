package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// benchParams is about 2M elements: 24 MiB of FP32 master and moments.
func benchParams() []optimizer.Param {
	return []optimizer.Param{
		{Name: "embed", Shape: []int{1024, 1024}},
		{Name: "proj", Shape: []int{1024, 1000}},
		{Name: "norm", Shape: []int{1024}, HighPrecision: true},
	}
}

func stateBytes(params []optimizer.Param) int64 {
	n := 0
	for _, p := range params {
		n += numElements(p.Shape)
	}
	return int64(12 * n)
}

// BenchmarkSave saves 24 MiB of optimizer state from 2 in-process ranks
// (file system writes and fsyncs included).
func BenchmarkSave(b *testing.B) {
	params := benchParams()
	c := newCluster(b, 2, params, optimizer.Config{}, optimizer.FromMap(weights(params, 1)))
	base := b.TempDir()
	b.SetBytes(stateBytes(params))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		root := filepath.Join(base, fmt.Sprint(i))
		c.save(root, SaveOptions{})
		b.StopTimer()
		os.RemoveAll(root)
		i++
		b.StartTimer()
	}
}

// BenchmarkLoad loads 24 MiB of optimizer state saved by 2 ranks into 2
// ranks (same layout) and into 3 (resharded), recast and gather included.
func BenchmarkLoad(b *testing.B) {
	params := benchParams()
	root := b.TempDir()
	newCluster(b, 2, params, optimizer.Config{}, optimizer.FromMap(weights(params, 1))).save(root, SaveOptions{})
	for _, d := range []int{2, 3} {
		b.Run(fmt.Sprintf("2 to %d ranks", d), func(b *testing.B) {
			c := newCluster(b, d, params, optimizer.Config{}, optimizer.FromMap(weights(params, 2)))
			b.SetBytes(stateBytes(params))
			b.ReportAllocs()
			for b.Loop() {
				c.must(c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
					ctx, cancel := testCtx()
					defer cancel()
					_, err := Load(ctx, o, comm, root, LoadOptions{})
					return err
				}))
			}
		})
	}
}
