package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// saveCheck is what ranks compare before a save.
type saveCheck struct {
	State string `json:"state"` // step and parameter digests
}

// SaveOptions tune Save. The zero value takes the defaults.
type SaveOptions struct {
	// ChunkBytes is the size of the checksummed chunks of every shard
	// file's data section, a positive multiple of 8 up to MaxChunkBytes
	// (0: DefaultChunkBytes). Other values fail Save with ErrOptions. A loader reads whole chunks, so it is also the
	// most a rank reads beyond the elements it needs, at each end of a
	// contiguous range.
	ChunkBytes int
	// Keep, when positive, removes after a successful save every complete
	// checkpoint under root but the Keep newest, and the staging
	// directories of earlier steps. Newest means: the checkpoint just saved,
	// then the others of lower steps, highest first, and only then those of
	// higher steps (left by another run before a Rewind), so that pruning
	// never removes the current run's checkpoints to keep an older run's.
	Keep int
	// Progress, if not nil, receives the bytes of this rank's shard file
	// as they are written (see TerminalProgress).
	Progress Progress
	// RankState, when not nil, is this rank's own state of the training
	// program (a model's amax histories, say), saved with the checkpoint
	// under the same atomicity and checksummed; Load returns it to the
	// same rank at the same world size (Info.RankState). Ranks may differ
	// in it.
	RankState []byte
	// Rewind allows a save of a step below the one root's "latest" names
	// (a fresh run saving into an old run's root): latest then moves back
	// to it. Without it such a save fails with ErrRewind and writes nothing.
	Rewind bool
}

// check refuses options Save cannot follow, naming the field and its
// limit.
func (opts *SaveOptions) check() error {
	if c := opts.ChunkBytes; c < 8 || c%8 != 0 || c > MaxChunkBytes {
		return fmt.Errorf("checkpoint: SaveOptions.ChunkBytes is %d, want a multiple of 8 from 8 to MaxChunkBytes (%d), or 0 for the default: %w",
			c, MaxChunkBytes, ErrOptions)
	}
	return nil
}

// Info describes a checkpoint.
type Info struct {
	Dir   string // the checkpoint directory
	Step  int    // steps the optimizer had taken when it was saved
	World int    // the data-parallel size it was saved at
	// RankState is what this rank saved as SaveOptions.RankState, returned
	// by Load when it runs at the world size saved; nil when nothing was
	// saved or the world size differs.
	RankState []byte
}

// Save writes the state of o to a new checkpoint, root/step-NNNNNNNN with N
// = o.StepCount(), and points root/latest at it. Every rank of o calls it
// together. comm is o's communicator, or one of the same ranks and memory
// kind; otherwise Save fails with ErrComm. A save interrupted at any point
// leaves the previous checkpoint whole: see the package doc, "Atomicity". If
// any rank fails, every rank fails with the lowest failing rank's error, its
// sentinel kept (see ErrRemote). Save fails with ErrDiverged, writing nothing,
// if the ranks' gathered parameters differ, and with ErrExists if latest names
// this step. A complete checkpoint of this step that latest does not name is
// replaced. Save does not change o.
func Save(ctx context.Context, o *optimizer.Optimizer, comm collective.Communicator, root string, opts SaveOptions) (Info, error) {
	g, err := newGroup(o, comm)
	if err != nil {
		return Info{}, err
	}
	if opts.ChunkBytes == 0 {
		opts.ChunkBytes = DefaultChunkBytes
	}
	rank, world, step := comm.Rank(), comm.Size(), o.StepCount()
	final := filepath.Join(root, stepDirName(step))
	staging := final + stagingSuffix
	info := Info{Dir: final, Step: step, World: world}

	// 1. Read the state; check that every rank holds the same parameters.
	var pieces []optimizer.PieceState
	err = opts.check()
	if err == nil {
		pieces, err = o.ReadPieces()
	}
	var fp8Sum, hpSum string
	var check saveCheck
	if err == nil {
		fp8Sum, hpSum, err = paramDigests(o)
	}
	check.State = fmt.Sprintf("%d %s %s", step, fp8Sum, hpSum)
	mine, _ := json.Marshal(check) // strings and bytes always marshal
	checks, err := g.agree(ctx, err, string(mine))
	if err != nil {
		return info, err
	}
	for r, s := range checks {
		var c saveCheck
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			return info, fmt.Errorf("checkpoint: rank %d sent %q: %w", r, s, ErrRemote)
		}
		if c.State != check.State {
			return info, fmt.Errorf("checkpoint: rank %d holds step and parameters %q, this rank %q; not saving: %w", r, c.State, check.State, ErrDiverged)
		}
	}
	castScales := o.Scalars().CastScales

	// 2. Rank 0 makes a fresh staging directory.
	err = nil
	if rank == 0 {
		err = prepare(root, final, staging, step, opts.Rewind)
	}
	if _, err := g.agree(ctx, err, ""); err != nil {
		return info, err
	}

	// 3. Every rank writes its shard.
	rec, err := writeShard(staging, rank, world, step, opts.ChunkBytes, storedMomentType(o.Config()), o.Config().Rule.Moments(), pieces, opts.Progress)
	if err == nil && opts.RankState != nil {
		rec.State, err = writeRankState(staging, rank, world, opts.RankState)
	}
	var recJSON []byte
	if err == nil {
		recJSON, err = json.Marshal(rec)
	}
	recs, err := g.agree(ctx, err, string(recJSON))
	if err != nil {
		return info, err
	}

	// 4. Rank 0 writes the index, renames the directory, moves latest.
	if rank == 0 {
		err = finish(root, final, staging, o, recs, castScales, fp8Sum, hpSum, opts)
	}
	if _, err = g.agree(ctx, err, ""); err == nil && rank == 0 {
		if l := o.Config().Logger; l != nil { // the optimizer's logger (optimizer.Config.Logger)
			l.Info("checkpoint: written", "dir", final, "step", step, "world", world)
		}
	}
	return info, err
}

// prepare checks that the save of step may go ahead (latest names an older
// step, or rewind is set) and makes an empty staging directory.
func prepare(root, final, staging string, step int, rewind bool) error {
	if err := hook(stagePrepare, 0); err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	switch n, why := newest(root); {
	case n == step && why == nil:
		return fmt.Errorf("checkpoint: %s is the latest checkpoint: %w", final, ErrExists)
	case n > step && !rewind && why == nil:
		return fmt.Errorf("checkpoint: %s/latest names step %d; saving step %d would move it backwards (another run's root? use a new root, or SaveOptions.Rewind): %w",
			root, n, step, ErrRewind)
	case n > step && !rewind:
		return fmt.Errorf("checkpoint: %s holds a complete checkpoint of step %d, and its latest pointer names none (%v); saving step %d would move latest backwards (use a new root, or SaveOptions.Rewind): %w",
			root, n, strings.TrimPrefix(why.Error(), "checkpoint: "), step, ErrRewind)
	}
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("checkpoint: removing a stale staging directory: %w", err)
	}
	if err := os.Mkdir(staging, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return syncDir(root)
}

// finish writes the index into the staging directory, renames it to final
// and points latest at it; then prunes.
func finish(root, final, staging string, o *optimizer.Optimizer, recs []string, castScales []float32, fp8Sum, hpSum string, opts SaveOptions) error {
	l := o.Layout()
	idx := &index{
		Step:                o.StepCount(),
		World:               l.World,
		Config:              configIndex(o.Config()),
		Scalars:             scalarIndex(o, castScales),
		FP8SHA256:           fp8Sum,
		HighPrecisionSHA256: hpSum,
	}
	idx.Layout, idx.Params = layoutIndex(l)
	for r, s := range recs {
		var rec fileRecord
		if err := json.Unmarshal([]byte(s), &rec); err != nil || rec.Rank != r {
			return fmt.Errorf("checkpoint: rank %d reported file %q: %w", r, s, ErrCorrupt)
		}
		idx.Files = append(idx.Files, rec)
	}
	if err := idx.validate(); err != nil {
		return fmt.Errorf("checkpoint: the index to write is inconsistent: %w", err)
	}
	data, err := encodeIndex(idx)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(staging, indexName), data, stageIndexWrite, stageIndexRename, 0); err != nil {
		return err
	}
	if err := hook(stageDirRename, 0); err != nil {
		return err
	}
	if _, err := os.Stat(final); err == nil {
		// A complete checkpoint of this step that latest does not name.
		old := final + ".old"
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if err := os.Rename(final, old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(staging, final); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(root); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(root, latestName), []byte(filepath.Base(final)+"\n"), stageLatestWrite, stageLatestRename, 0); err != nil {
		return err
	}
	if opts.Keep > 0 {
		return prune(root, idx.Step, opts.Keep)
	}
	return nil
}

// scalarIndex records the scalar state of o, with the given cast scales.
func scalarIndex(o *optimizer.Optimizer, castScales []float32) scalarRecord {
	s := o.Scalars()
	rec := scalarRecord{Step: s.Step, LossScale: s.LossScale, LossScaleGood: s.LossScaleGood}
	if len(s.AmaxHistories) == 0 {
		return rec
	}
	rec.AmaxHistory, rec.CastScale = map[string][]uint32{}, map[string]uint32{}
	for i, name := range fp8Params(o) {
		bits := make([]uint32, len(s.AmaxHistories[i]))
		for k, a := range s.AmaxHistories[i] {
			bits[k] = math.Float32bits(a)
		}
		rec.AmaxHistory[name] = bits
		rec.CastScale[name] = math.Float32bits(castScales[i])
	}
	return rec
}

// fp8Params lists the FP8 parameters of o in layout order: the order of
// ScalarState's amax histories.
func fp8Params(o *optimizer.Optimizer) []string {
	var out []string
	for _, p := range o.Layout().Params {
		if !p.HighPrecision {
			out = append(out, p.Name)
		}
	}
	return out
}

// prune removes all but the keep newest complete checkpoints under root
// (never the one of step current; see SaveOptions.Keep for the order) and
// staging directories of earlier steps. Failures to remove are ignored:
// pruning never fails a save.
func prune(root string, current, keep int) error {
	dirs, err := stepDirs(root)
	if err != nil {
		return nil
	}
	var complete []stepDir
	for _, d := range dirs {
		switch {
		case d.staging && d.step < current:
			os.RemoveAll(filepath.Join(root, d.name))
		case !d.staging:
			complete = append(complete, d)
		}
	}
	// Steps up to current first, then those past it (another run's, left
	// before a rewind); highest first within each.
	slices.SortFunc(complete, func(a, b stepDir) int {
		if pa, pb := a.step > current, b.step > current; pa != pb {
			if pa {
				return 1
			}
			return -1
		}
		return b.step - a.step
	})
	kept := 0
	for _, d := range complete {
		if kept < keep || d.step == current {
			kept++
			continue
		}
		os.RemoveAll(filepath.Join(root, d.name))
	}
	return nil
}
