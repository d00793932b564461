package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/safetensors"
)

// Export writes the full-precision (FP32 master) weights of o to one
// safetensors file at path: one F32 tensor per parameter, named and shaped
// as the parameter, in layout order, with metadata "format": "pt" (as
// PyTorch tools expect) and "distopt.step". Every rank of o must call it
// together; each writes its own pieces into the file at their offsets, so
// no rank gathers the model, and the ranks must share the file system.
// The file is written as path.tmp, synced, and renamed when every rank has
// written: path is either absent, as before, or complete. Export fails on
// every rank if any rank fails (see Save for how errors travel). It does
// not change o.
func Export(ctx context.Context, o *optimizer.Optimizer, comm collective.Communicator, path string) error {
	g, err := newGroup(o, comm)
	if err != nil {
		return err
	}
	rank := comm.Rank()
	specs := make([]safetensors.Spec, len(o.Layout().Params))
	for i, p := range o.Layout().Params {
		specs[i] = safetensors.Spec{Name: p.Name, DType: safetensors.F32, Shape: p.Shape}
	}
	h, raw, err := safetensors.Encode(specs, map[string]string{"format": "pt", metaStep: strconv.Itoa(o.StepCount())})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	tmp := path + ".tmp"
	pieces, err := o.ReadPieces()
	if err == nil && rank == 0 {
		err = createSized(tmp, raw, h.Size())
	}
	if _, err := g.agree(ctx, err, ""); err != nil {
		return err
	}
	err = writeExportPieces(tmp, h, pieces, rank)
	if _, err := g.agree(ctx, err, ""); err != nil {
		if rank == 0 {
			os.Remove(tmp)
		}
		return err
	}
	if rank == 0 {
		err = hook(stageExportRename, rank)
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err == nil {
			err = syncDir(filepath.Dir(path))
		} else {
			os.Remove(tmp)
		}
	}
	_, err = g.agree(ctx, err, "")
	return err
}

// createSized creates path holding header followed by zeros up to size
// bytes, synced.
func createSized(path string, header []byte, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if _, err = f.Write(header); err == nil {
		if err = f.Truncate(size); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("checkpoint: creating %s: %w", path, err)
	}
	return nil
}

// writeExportPieces writes rank's master pieces into the export file at
// their offsets and syncs it.
func writeExportPieces(path string, h *safetensors.Header, pieces []optimizer.PieceState, rank int) error {
	if err := hook(stageExportWrite, rank); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, p := range pieces {
		t, _ := h.Lookup(p.Param) // every parameter has its tensor
		buf := make([]byte, 4*len(p.Master))
		encodeValues(buf, p.Master, safetensors.F32)
		if _, err = f.WriteAt(buf, h.DataOffset+t.Begin+4*int64(p.Offset)); err != nil {
			break
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	return nil
}
