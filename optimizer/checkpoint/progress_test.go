package checkpoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// progressLog records the reports of one rank.
type progressLog struct{ done, total []int64 }

func (l *progressLog) progress() Progress {
	return func(done, total int64) { l.done, l.total = append(l.done, done), append(l.total, total) }
}

// check asserts reports that grow to a total of want bytes, never past it,
// with one total throughout.
func (l *progressLog) check(t *testing.T, what string, want int64) {
	t.Helper()
	if want == 0 {
		if len(l.done) != 0 {
			t.Errorf("%s: %d reports of nothing", what, len(l.done))
		}
		return
	}
	if len(l.done) == 0 {
		t.Fatalf("%s: no reports, want %d bytes", what, want)
	}
	for i := range l.done {
		if l.total[i] != want || l.done[i] > want || (i > 0 && l.done[i] < l.done[i-1]) {
			t.Fatalf("%s: report %d is %d of %d, want a total of %d, growing", what, i, l.done[i], l.total[i], want)
		}
	}
	if last := l.done[len(l.done)-1]; last != want {
		t.Errorf("%s: ends at %d of %d bytes", what, last, want)
	}
}

// TestProgress saves on 2 ranks and loads on 3, each rank with its own
// Progress: a save reports the data section of the rank's shard file
// (its size on disk less the header), a load the bytes of the pieces the
// rank now owns (4 for the master and the moments' size for each moment,
// per element, counted from the optimizer's own pieces).
func TestProgress(t *testing.T) {
	params := testParams()
	cfg := testConfigs()["bf16 moments, loss scaler, delayed most-recent"]
	src := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	src.train(0, 2)
	root := t.TempDir()
	saves := make([]progressLog, 2)
	var info Info
	src.must(src.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		in, err := Save(ctx, o, comm, root, SaveOptions{ChunkBytes: 4096, Progress: saves[r].progress()})
		if r == 0 {
			info = in
		}
		return err
	}))
	idx, _, err := readIndex(info.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for r := range saves {
		s, err := openShard(info.Dir, idx.Files[r])
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		st, _ := os.Stat(filepath.Join(info.Dir, idx.Files[r].Name))
		saves[r].check(t, "save", st.Size()-s.h.DataOffset)
	}

	dst := newCluster(t, 3, params, cfg, optimizer.FromMap(weights(params, 2)))
	loads := make([]progressLog, 3)
	dst.must(dst.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		_, err := Load(ctx, o, comm, root, LoadOptions{Progress: loads[r].progress()})
		return err
	}))
	for r, o := range dst.opts {
		pieces, err := o.ReadPieces()
		if err != nil {
			t.Fatal(err)
		}
		var want int64
		for _, p := range pieces {
			want += int64(len(p.Master)) * int64(4+2*buffer.BFloat16.Size())
		}
		loads[r].check(t, "load", want)
	}
}
