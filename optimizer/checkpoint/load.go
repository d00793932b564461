package checkpoint

import (
	"context"
	"fmt"
	"math"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/safetensors"
)

// LoadOptions allow the conversions Load refuses by default.
type LoadOptions struct {
	// ConvertRecipe loads a checkpoint saved under another FP8 recipe, or
	// with other parameters marked high-precision. Masters and moments are
	// FP32 (or the moment type) whatever the recipe, so they load as saved
	// and the FP8 parameters are cast from them under the new recipe. The
	// amax histories of delayed scaling are not carried over: they record
	// casts made under the old recipe (another history length or
	// reduction; scales of another format or margin; none at all for the
	// current and block recipes), so with a TensorDelayed recipe they are
	// seeded from the loaded masters exactly as New seeds them from
	// initial weights: a history of zeros ending in the tensor's amax, and
	// a first cast with the scale of that amax.
	ConvertRecipe bool
	// WidenMoments loads moments saved as bfloat16 into an optimizer with
	// float32 moments. Widening is exact (every bfloat16 value is a
	// float32), so the loaded moments equal the saved ones; the continued
	// run then differs from one that kept bfloat16 moments only in the
	// precision of the moments from then on. The other way, float32 into
	// bfloat16, would round every moment, losing state; it is always
	// refused with ErrMomentType.
	WidenMoments bool
	// AllowUnused loads a checkpoint that holds parameters the optimizer
	// does not have, ignoring them. Parameters of the optimizer missing
	// from the checkpoint are always an error (ErrParamMissing).
	AllowUnused bool
	// Progress, if not nil, receives the bytes this rank reads of the
	// parameters' state as they are read (see TerminalProgress).
	Progress Progress
}

// Load replaces the state of o with the checkpoint at path, a checkpoint
// directory or a root with a "latest" pointer. Every rank of o calls it
// together, at any data-parallel size. Load then casts and gathers the FP8
// parameters. It fails with ErrDiverged if the ranks' gathered parameters
// differ, and without a conversion with ErrVerify if they are not those
// saved. After either error, o must not be used. The other errors come before
// the state is replaced, on every rank, and leave o as it was: ErrNotFound,
// ErrIncomplete, ErrMissingFile, ErrTruncated, ErrChecksum, ErrCorrupt,
// ErrVersion, ErrParamMissing, ErrShape, ErrRecipe, ErrMomentType, ErrRule. A
// failure while the state is replaced leaves o broken (optimizer.ErrBroken).
func Load(ctx context.Context, o *optimizer.Optimizer, comm collective.Communicator, path string, opts LoadOptions) (Info, error) {
	g, err := newGroup(o, comm)
	if err != nil {
		return Info{}, err
	}
	st, err := prepareLoad(o, comm.Rank(), path, opts)
	value := ""
	var state []byte
	if err == nil {
		value = st.bodySum
		state, err = loadRankState(st.dir, st.idx, comm.Rank(), comm.Size())
	}
	sums, err := g.agree(ctx, err, value)
	if err != nil {
		return Info{}, err
	}
	for r, s := range sums {
		if s != sums[0] {
			return Info{}, fmt.Errorf("checkpoint: rank %d read index %s, rank 0 %s: %w", r, s, sums[0], ErrDiverged)
		}
	}
	info := Info{Dir: st.dir, Step: st.idx.Step, World: st.idx.World, RankState: state}
	if st.reseed != nil {
		if err := g.maxUint32(ctx, st.reseed); err != nil {
			return info, fmt.Errorf("checkpoint: reducing the amax of the loaded masters: %w", err)
		}
		seedHistories(&st.scalars, st.reseed, o.Config().Recipe)
	}
	if err := o.SetScalars(st.scalars); err != nil {
		return info, err
	}
	if err := o.LoadPieces(ctx, st.set); err != nil {
		return info, err
	}
	fp8Sum, hpSum, err := paramDigests(o)
	held, err := g.agree(ctx, err, fp8Sum+" "+hpSum)
	if err != nil {
		return info, err
	}
	for r, s := range held {
		if s != held[0] {
			return info, fmt.Errorf("checkpoint: after the load rank %d holds parameters %s, rank 0 %s: %w", r, s, held[0], ErrDiverged)
		}
	}
	if st.converted || st.subset {
		return info, nil // the digests saved cover other parameters or another cast
	}
	if fp8Sum != st.idx.FP8SHA256 {
		return info, fmt.Errorf("checkpoint: FP8 parameters recomputed from %s differ from those saved: %w", st.dir, ErrVerify)
	}
	if st.idx.Config.HighPrecisionType == o.Config().HighPrecisionType.String() && hpSum != st.idx.HighPrecisionSHA256 {
		return info, fmt.Errorf("checkpoint: high-precision parameters recomputed from %s differ from those saved: %w", st.dir, ErrVerify)
	}
	return info, nil
}

// loadState is what a rank prepares before any collective of a load.
type loadState struct {
	dir       string
	idx       *index
	bodySum   string
	converted bool // another recipe or other high-precision marks
	subset    bool // the checkpoint holds parameters the optimizer lacks
	scalars   optimizer.ScalarState
	reseed    []uint32 // amax bits of each FP8 parameter's local pieces, when histories are seeded
	pieces    map[pieceKey]*pieceValues
}

type pieceKey struct {
	name   string
	offset int
}

type pieceValues struct{ master, m, v []float32 }

// set is the optimizer.PieceSetter of the loaded pieces.
func (st *loadState) set(name string, offset int, master, m, v []float32) error {
	pv, ok := st.pieces[pieceKey{name, offset}]
	if !ok || len(pv.master) != len(master) {
		return fmt.Errorf("checkpoint: piece %s was not read: %w", tensorBase(name, offset), ErrCorrupt)
	}
	copy(master, pv.master)
	copy(m, pv.m)
	copy(v, pv.v)
	return nil
}

// prepareLoad resolves path, reads and checks the index against o, and
// reads this rank's pieces. It runs no collective.
func prepareLoad(o *optimizer.Optimizer, rank int, path string, opts LoadOptions) (*loadState, error) {
	dir, err := resolve(path)
	if err != nil {
		return nil, err
	}
	idx, sum, err := readIndex(dir)
	if err != nil {
		return nil, err
	}
	st := &loadState{dir: dir, idx: idx, bodySum: sum}
	saved, err := st.check(o, opts)
	if err != nil {
		return nil, err
	}
	if err := st.read(o, rank, saved, opts.Progress); err != nil {
		return nil, err
	}
	return st, st.scalarState(o)
}

// check compares the checkpoint with o's parameters and configuration and
// returns the saved parameters by name.
func (st *loadState) check(o *optimizer.Optimizer, opts LoadOptions) (map[string]*paramRec, error) {
	idx, cfg := st.idx, o.Config()
	cur := configIndex(cfg)
	if idx.Config.Rule != cur.Rule {
		return nil, fmt.Errorf("checkpoint: %s was saved by %s, the optimizer runs %s: %w", st.dir, idx.Config.Rule, cur.Rule, ErrRule)
	}
	if idx.Config.MomentType != cur.MomentType {
		widen := idx.Config.MomentType == buffer.BFloat16.String() && cur.MomentType == buffer.Float32.String()
		if !widen || !opts.WidenMoments {
			return nil, fmt.Errorf("checkpoint: %s holds %s moments, the optimizer keeps %s (only bfloat16 to float32 converts, with WidenMoments): %w",
				st.dir, idx.Config.MomentType, cur.MomentType, ErrMomentType)
		}
	}
	if err := st.checkMomentTypes(cur); err != nil {
		return nil, err
	}
	saved := make(map[string]*paramRec, len(idx.Params))
	for i := range idx.Params {
		saved[idx.Params[i].Name] = &idx.Params[i]
	}
	used := 0
	for _, p := range o.Layout().Params {
		sp, ok := saved[p.Name]
		if !ok {
			return nil, fmt.Errorf("checkpoint: %s has no parameter %q: %w", st.dir, p.Name, ErrParamMissing)
		}
		used++
		if !sameShape(sp.Shape, p.Shape) {
			return nil, fmt.Errorf("checkpoint: %s holds %q with shape %v, the optimizer %v: %w", st.dir, p.Name, sp.Shape, p.Shape, ErrShape)
		}
		if sp.HighPrecision != p.HighPrecision {
			if !opts.ConvertRecipe {
				return nil, fmt.Errorf("checkpoint: %s holds %q with high precision %t, the optimizer %t: %w", st.dir, p.Name, sp.HighPrecision, p.HighPrecision, ErrRecipe)
			}
			st.converted = true
		}
	}
	if used != len(idx.Params) {
		if !opts.AllowUnused {
			return nil, fmt.Errorf("checkpoint: %s holds %d parameters the optimizer does not have (see AllowUnused): %w", st.dir, len(idx.Params)-used, ErrParamMissing)
		}
		st.subset = true
	}
	if idx.Config.Recipe != cur.Recipe {
		if !opts.ConvertRecipe {
			return nil, fmt.Errorf("checkpoint: %s was saved under recipe %+v, the optimizer uses %+v: %w", st.dir, idx.Config.Recipe, cur.Recipe, ErrRecipe)
		}
		st.converted = true
	}
	return saved, nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// read reads the state of every piece rank owns in o's layout from the
// pieces that hold it in the checkpoint.
func (st *loadState) read(o *optimizer.Optimizer, rank int, saved map[string]*paramRec, progress Progress) error {
	l := o.Layout()
	cfg := o.Config()
	mdt := safetensors.DType(safetensors.F32)
	if st.idx.Config.MomentType == buffer.BFloat16.String() {
		mdt = safetensors.BF16
	}
	moments := cfg.Rule.Moments() // "m", then "v" for a rule with two
	st.pieces = map[pieceKey]*pieceValues{}
	byFile := map[int][]request{}
	type want struct {
		tensor, suffix string
		dt             safetensors.DType
		len, from, n   int // saved piece length; first element and count wanted
		dst            []float32
	}
	perFile := map[int][]want{}
	for b := range l.Buckets {
		for _, pc := range l.Pieces(b, rank) {
			name := l.Params[pc.Param].Name
			pv := &pieceValues{master: make([]float32, pc.Len), m: make([]float32, pc.Len)}
			if len(moments) > 1 {
				pv.v = make([]float32, pc.Len)
			}
			st.pieces[pieceKey{name, pc.ParamOffset}] = pv
			lo, hi := pc.ParamOffset, pc.ParamOffset+pc.Len
			for _, sp := range saved[name].Pieces {
				a, e := max(lo, sp.Offset), min(hi, sp.Offset+sp.Len)
				if a >= e {
					continue
				}
				add := func(suffix string, dt safetensors.DType, dst []float32) {
					perFile[sp.Rank] = append(perFile[sp.Rank], want{sp.Tensor, suffix, dt, sp.Len, a - sp.Offset, e - a, dst[a-lo : e-lo]})
				}
				add("/master", safetensors.F32, pv.master)
				add("/"+moments[0], mdt, pv.m)
				if len(moments) > 1 {
					add("/"+moments[1], mdt, pv.v)
				}
			}
		}
	}
	m := &meter{p: progress}
	for _, ws := range perFile {
		for _, w := range ws {
			m.total += int64(w.n * w.dt.Size())
		}
	}
	for r, ws := range perFile {
		s, err := openShard(st.dir, st.idx.Files[r])
		if err != nil {
			return err
		}
		s.read = m
		for _, w := range ws {
			t, err := s.tensor(w.tensor+w.suffix, w.dt, w.len)
			if err != nil {
				s.Close()
				return err
			}
			esz := int64(w.dt.Size())
			begin := t.Begin + int64(w.from)*esz
			byFile[r] = append(byFile[r], request{begin: begin, end: begin + int64(w.n)*esz, dt: w.dt, dst: w.dst})
		}
		err = readRequests(s, byFile[r])
		s.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// scalarState builds the ScalarState to restore. Without conversion the
// saved amax histories and cast scales are restored; with a conversion into
// delayed scaling, st.reseed receives the local amax of each FP8
// parameter's loaded masters, to be reduced and seeded by seedHistories.
func (st *loadState) scalarState(o *optimizer.Optimizer) error {
	idx, cfg := st.idx, o.Config()
	s := optimizer.ScalarState{Step: idx.Scalars.Step}
	cur := o.Scalars()
	if cfg.LossScaler != nil {
		s.LossScale, s.LossScaleGood = cur.LossScale, cur.LossScaleGood
		if idx.Config.LossScaler {
			s.LossScale, s.LossScaleGood = idx.Scalars.LossScale, idx.Scalars.LossScaleGood
		}
	}
	names := fp8Params(o)
	if len(cur.AmaxHistories) == 0 {
		st.scalars = s
		return nil
	}
	if st.converted {
		slot := make(map[string]int, len(names))
		for i, name := range names {
			slot[name] = i
		}
		st.reseed = make([]uint32, len(names))
		for k, pv := range st.pieces {
			i, ok := slot[k.name]
			if !ok {
				continue // a high-precision parameter
			}
			for _, x := range pv.master {
				st.reseed[i] = max(st.reseed[i], math.Float32bits(x)&0x7fffffff)
			}
		}
		st.scalars = s
		return nil
	}
	n := cfg.Recipe.History()
	for _, name := range names {
		bits, ok := idx.Scalars.AmaxHistory[name]
		scale, ok2 := idx.Scalars.CastScale[name]
		if !ok || !ok2 || len(bits) != n {
			return fmt.Errorf("checkpoint: %s holds no amax history of length %d for %q: %w", st.dir, n, name, ErrCorrupt)
		}
		h := make([]float32, n)
		for k, b := range bits {
			h[k] = math.Float32frombits(b)
		}
		s.AmaxHistories = append(s.AmaxHistories, h)
		s.CastScales = append(s.CastScales, math.Float32frombits(scale))
	}
	st.scalars = s
	return nil
}

// seedHistories sets the amax histories and cast scales of delayed scaling
// as New leaves them after casting masters whose reduced amaxes are amax:
// each history all zeros but its newest entry, the amax; each cast scale
// ScaleFromAmax of it.
func seedHistories(s *optimizer.ScalarState, amax []uint32, r fp8.Recipe) {
	n := r.History()
	for _, bits := range amax {
		am := math.Float32frombits(bits)
		h := make([]float32, n)
		h[n-1] = am
		scale, _ := fp8.ScaleFromAmax(am, r.Format, r.Margin, r.PowerOf2)
		s.AmaxHistories = append(s.AmaxHistories, h)
		s.CastScales = append(s.CastScales, scale)
	}
}
