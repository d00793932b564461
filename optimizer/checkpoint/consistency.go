package checkpoint

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/safetensors"
	"github.com/distopt/distopt/shard"
)

// checkDerived checks what the index records twice: the step (in Step, in
// the scalars, and in the directory's name when it is a step directory),
// and the layout record and pieces, which must be exactly those that
// shard.New makes of the recorded parameters, world and options. An index
// edited by hand (a shape, a name, a step) and re-hashed fails here, in
// Verify as in Load.
func (idx *index) checkDerived(dir string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrCorrupt)
	}
	if idx.Scalars.Step != idx.Step {
		return bad("step %d, but the scalar state is of step %d", idx.Step, idx.Scalars.Step)
	}
	if m := stepDirRE.FindStringSubmatch(filepath.Base(dir)); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n != idx.Step {
			return bad("step %d in directory %s", idx.Step, filepath.Base(dir))
		}
	}
	sp := make([]shard.Param, len(idx.Params))
	for i, p := range idx.Params {
		sp[i] = shard.Param{Name: p.Name, Shape: p.Shape, HighPrecision: p.HighPrecision}
	}
	l, err := shard.New(sp, idx.World, shard.Options{BucketElements: idx.Layout.BucketElements, Align: idx.Layout.Align, HighPrecisionAlign: idx.Layout.HighPrecisionAlign})
	if err != nil {
		return bad("the recorded parameters make no layout: %v", err)
	}
	lr, params := layoutIndex(l)
	if !reflect.DeepEqual(lr, idx.Layout) {
		return bad("the layout record (fingerprint %s) is not the layout of the recorded parameters (fingerprint %s)", idx.Layout.Fingerprint, lr.Fingerprint)
	}
	for i := range params {
		if !reflect.DeepEqual(params[i], idx.Params[i]) {
			return bad("parameter %q: the recorded pieces are not those of its shape %v in the layout", idx.Params[i].Name, idx.Params[i].Shape)
		}
	}
	return nil
}

// verifyTensors checks that the shard file s of rank holds every tensor
// the index places there, with the type and length Load will ask for.
func (idx *index) verifyTensors(s *shardFile, rank int) error {
	mdt := safetensors.DType(safetensors.F32)
	if idx.Config.MomentType == buffer.BFloat16.String() {
		mdt = safetensors.BF16
	}
	for _, p := range idx.Params {
		for _, pc := range p.Pieces {
			if pc.Rank != rank {
				continue
			}
			if _, err := s.tensor(pc.Tensor+"/master", safetensors.F32, pc.Len); err != nil {
				return err
			}
			if _, err := s.tensor(pc.Tensor+"/m", mdt, pc.Len); err != nil {
				return err
			}
			if idx.Config.Rule == optimizer.RuleAdamW.String() {
				if _, err := s.tensor(pc.Tensor+"/v", mdt, pc.Len); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkRecords checks what Load reads of the index besides the layout:
// an update rule this reader knows (it decides the tensors of each
// piece) and, under delayed scaling, every FP8 parameter's amax history of
// the recipe's length with its cast scale, which a load restores.
func (idx *index) checkRecords() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrCorrupt)
	}
	if rule := idx.Config.Rule; rule != optimizer.RuleAdamW.String() && rule != optimizer.RuleSGD.String() {
		return bad("update rule %q", rule)
	}
	r := idx.Config.Recipe
	if r.Scaling != fp8.TensorDelayed.String() {
		return nil
	}
	n := r.HistoryLen
	if n == 0 {
		n = fp8.DefaultHistoryLen
	}
	for _, p := range idx.Params {
		if p.HighPrecision {
			continue
		}
		bits, ok := idx.Scalars.AmaxHistory[p.Name]
		_, ok2 := idx.Scalars.CastScale[p.Name]
		if !ok || !ok2 || len(bits) != n {
			return bad("holds no amax history of length %d (and cast scale) for %q", n, p.Name)
		}
	}
	return nil
}
