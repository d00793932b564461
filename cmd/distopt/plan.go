package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/progress"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/plan"
	"github.com/distopt/distopt/shard"
)

func init() {
	commands["plan"] = command{summary: "predict the memory of each buffer per rank, and compare configurations", run: planCommand}
}

// defaultDs are the data-parallel sizes of `distopt plan` without -d.
var defaultDs = []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// planOptions are the arguments of `distopt plan`.
type planOptions struct {
	model    plan.Model // a preset of -model, the shape of -params, or the GPT shape of the flags
	ds       []int
	cfg      optimizer.Config
	exactAvg bool            // the NCCL communicator's Config.ExactAvg
	gradFP8  *fp8grad.Config // non-nil: gradients reduce-scattered by collective/fp8grad
	group    int             // > 0: hierarchical sharding within groups of this many ranks (collective/hier)
	step     stepOptions
	bytes    bool     // exact bytes instead of GiB
	gpu      plan.GPU // Bytes > 0: warn where a configuration does not fit
	list     bool     // -model list: print the presets
	chart    string   // a .png or .svg file to draw the comparison into
	progress progress.Func
}

// planCommand is `distopt plan`.
func planCommand(args []string) int { return runPlan(args, os.Stdout, os.Stderr) }

// runPlan parses args, prints the plan to stdout and returns the exit
// status: 0, or 2 for invalid arguments (explained on stderr).
func runPlan(args []string, stdout, stderr io.Writer) int {
	o, err := parsePlan(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && o.list {
		writePresets(stdout)
		return 0
	}
	if f, ok := stderr.(*os.File); ok {
		o.progress = progress.Terminal(f, "planning", false)
	}
	if err == nil {
		var p *memoryPlan
		if o.step.cluster != "" {
			return runStepPlan(o, stdout, stderr)
		}
		if p, err = makePlan(o); err == nil {
			p.write(stdout, o.bytes)
			p.warn(stderr)
			if o.chart == "" {
				return 0
			}
			if err = p.writeChart(o.chart); err == nil {
				fmt.Fprintf(stdout, "wrote %s\n", o.chart)
				return 0
			}
			fmt.Fprintf(stderr, "distopt plan: %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "distopt plan: %v\n", err)
	return 2
}

// parsePlan parses the arguments of `distopt plan`.
func parsePlan(args []string, stderr io.Writer) (planOptions, error) {
	var o planOptions
	gpt := plan.GPT13B
	fs := flag.NewFlagSet("distopt plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	gpt.RegisterFlags(fs)
	fs.BoolVar(&gpt.Tied, "tied", false, "tie the GPT-like model's head to its token embedding")
	model := fs.String("model", "", "a model preset (-model list shows them): gpt2, gpt2-medium, ..., llama-3-70b")
	params := fs.String("params", "", "plan for a model of this many parameters (70B, 70e9, 1.3B, 350M): a Llama-like shape of that size, instead of a model shape")
	gpu := fs.String("gpu", "", "warn where a configuration does not fit this GPU's memory: "+gpuNames())
	ds := fs.String("d", "", "data-parallel sizes, comma-separated (default 1,2,4,...,1024)")
	moments := fs.String("moments", "fp32", "Adam moments: fp32, bf16 or fp8 (E4M3 with a float32 scale per block) for both, or M,V one by one (e.g. fp8,bf16)")
	fs.IntVar(&o.cfg.MomentBlock, "moment-block", 0, "block of FP8 moments in elements: 32, 64 or 128 (0: 128)")
	grads := fs.String("grads", "bf16", "gradients: bf16 or fp32")
	hp := fs.String("hp", "bf16", "gathered copies of high-precision parameters (norms, biases): bf16 or fp32")
	recipe := fs.String("recipe", "current", "FP8 scaling, as every distopt tool names it: current, delayed, block (1x128), tile (128x128) or mx (MXFP8), case-insensitive, or a Transformer Engine or Megatron name (Float8CurrentScaling, blockwise, ...); NAME:E5M2 picks the format")
	format := fs.String("format", "", "FP8 format: e4m3 or e5m2 (default: the recipe's, E4M3)")
	fs.IntVar(&o.cfg.Recipe.HistoryLen, "history", 0, "amax history length of -recipe delayed (0: 1024)")
	fs.IntVar(&o.cfg.Layout.BucketElements, "bucket", 0, fmt.Sprintf("bucket size in elements (0: %d)", shard.DefaultBucketElements))
	fs.BoolVar(&o.cfg.ShardedGradients, "sharded-grads", false, "sharded gradients (ZeRO-2): a pool of bucket-sized gradient buffers and a gradient shard per rank instead of a full-size gradient buffer")
	fs.IntVar(&o.cfg.GradBuffers, "grad-buffers", 0, "buffers of the -sharded-grads pool (0: 2)")
	sgd := fs.Bool("sgd", false, "SGD with momentum instead of AdamW (one moment)")
	gradFP8 := registerGradFP8(fs)
	fs.BoolVar(&o.exactAvg, "exact-avg", false, "the NCCL communicator's ExactAvg: bfloat16 gradients are averaged in float32 scratch")
	fs.IntVar(&o.group, "group", 0, "hierarchical sharding (collective/hier): shard the state within groups of `G` ranks (a node) and replicate it across groups; every d above G must be a multiple of G (0: flat)")
	o.step.flags(fs)
	fs.BoolVar(&o.bytes, "bytes", false, "print bytes instead of GiB")
	fs.StringVar(&o.chart, "chart", "", "draw the comparison into this .png or .svg file (GiB per rank against d)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: distopt plan [-model NAME | -layers L -hidden H -ffn F -vocab V -positions P [-tied] | -params N] [-d 1,2,...] [-gpu NAME] [options]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	err := o.setModel(fs, gpt, *model, *params, *gpu)
	if err != nil || o.list {
		return o, err
	}
	if ext := strings.ToLower(filepath.Ext(o.chart)); o.chart != "" && ext != ".png" && ext != ".svg" {
		return o, fmt.Errorf("-chart=%q: want a .png or .svg file", o.chart)
	}
	if o.ds, err = parseDs(*ds); err != nil {
		return o, err
	}
	if *sgd { // before the numerics: -moments then names SGD's one moment
		o.cfg.Rule = optimizer.RuleSGD
		o.cfg.Momentum = 0.9
	}
	if err := o.setNumerics(*moments, *grads, *hp, *recipe, *format); err != nil {
		return o, err
	}
	if o.gradFP8, err = gradFP8.config(); err != nil {
		return o, err
	}
	if o.gradFP8 != nil && o.step.cluster != "" {
		return o, errors.New("-grad-fp8 with -steptime: the step-time model does not model the FP8 reduce-scatter's wire bytes (plan its memory without -steptime)")
	}
	return o, nil
}

// setNumerics sets the number formats of o's configuration from the
// flags -moments, -grads, -hp, -recipe and -format.
func (o *planOptions) setNumerics(moments, grads, hp, recipe, format string) error {
	var err error
	dtype := func(flagName, v string) (buffer.DType, error) {
		switch v {
		case "bf16", "bfloat16":
			return buffer.BFloat16, nil
		case "fp32", "float32":
			return buffer.Float32, nil
		}
		return 0, fmt.Errorf("-%s=%q: want bf16 or fp32", flagName, v)
	}
	if err := o.setMoments(moments); err != nil {
		return err
	}
	if o.cfg.GradType, err = dtype("grads", grads); err != nil {
		return err
	}
	if o.cfg.HighPrecisionType, err = dtype("hp", hp); err != nil {
		return err
	}
	r, err := fp8.ParseRecipe(recipe)
	if err != nil {
		return fmt.Errorf("-recipe: %w", err)
	}
	r.HistoryLen = o.cfg.Recipe.HistoryLen
	o.cfg.Recipe = r
	switch strings.ToLower(format) {
	case "":
	case "e4m3":
		o.cfg.Recipe.Format = fp8.E4M3
	case "e5m2":
		o.cfg.Recipe.Format = fp8.E5M2
	default:
		return fmt.Errorf("-format=%q: want e4m3 or e5m2", format)
	}
	return nil
}

// setModel sets o's model from the flags: a preset, a count of
// parameters, or the GPT shape (the default), at most one of them; and
// the GPU of -gpu.
func (o *planOptions) setModel(fs *flag.FlagSet, gpt plan.GPTConfig, model, params, gpu string) error {
	var shape []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "layers", "hidden", "ffn", "vocab", "positions", "tied":
			shape = append(shape, "-"+f.Name)
		}
	})
	switch {
	case model != "" && params != "":
		return errors.New("-model and -params: give one of them")
	case (model != "" || params != "") && len(shape) > 0:
		return fmt.Errorf("%s set a GPT-like shape: give it, -model or -params, not several", strings.Join(shape, " "))
	case model == "list":
		o.list = true
		return nil
	case model != "":
		p, err := plan.LookupPreset(model)
		if err != nil {
			return fmt.Errorf("-model: %w", err)
		}
		o.model = p.Model
	case params != "":
		n, err := plan.ParseCount(params)
		if err != nil {
			return fmt.Errorf("-params: %w", err)
		}
		o.model = plan.ForCount(n)
	default:
		if err := gpt.Validate(); err != nil {
			return err
		}
		o.model = gpt
	}
	if gpu != "" {
		g, err := plan.LookupGPU(gpu)
		if err != nil {
			return fmt.Errorf("-gpu: %w", err)
		}
		o.gpu = g
	}
	return nil
}

// gpuNames lists the names -gpu accepts.
func gpuNames() string {
	names := make([]string, len(plan.GPUs))
	for i, g := range plan.GPUs {
		names[i] = g.Name
	}
	return strings.Join(names, ", ")
}

// writePresets prints the presets of -model, with their sizes.
func writePresets(w io.Writer) {
	for _, p := range plan.Presets {
		fmt.Fprintf(w, "%-14s %6.2fB  %s\n", p.Name, float64(p.Model.NumParams())/1e9, p.Model.Describe())
	}
}

// parseDs parses a comma-separated list of data-parallel sizes ("" gives
// defaultDs).
func parseDs(s string) ([]int, error) {
	if s == "" {
		return defaultDs, nil
	}
	var ds []int
	for f := range strings.SplitSeq(s, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 1 {
			return nil, fmt.Errorf("-d=%q: %q is not a positive integer", s, f)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// modelParams returns the parameters and a one-line description of the
// model.
func (o planOptions) modelParams() ([]optimizer.Param, string) {
	return o.model.Params(), o.model.Describe()
}

// memoryPlan is the prediction for every data-parallel size.
type memoryPlan struct {
	model, config string
	n, nFP8       int64 // parameters, and those gathered in FP8
	ds            []int
	reports       []optimizer.MemoryReport // one per d
	scratch       []int64                  // NCCL scratch per d
	fp8           []fp8grad.Memory         // FP8 gradient staging and residuals per d (-grad-fp8)
	fp8Closed     func(d int) float64      // their closed form in bytes per parameter
	fp8Desc       string                   // the FP8 gradient reduce-scatter, "" without it
	closedForm    func(d int) float64      // bytes per parameter without scales or padding
	formula       string
	alt           []int64 // device total per d under the other gradient option
	altName       string
	gpu           plan.GPU // Bytes 0: no GPU chosen
}

// makePlan predicts the memory of every d of o.
func makePlan(o planOptions) (*memoryPlan, error) {
	params, desc := o.modelParams()
	p := &memoryPlan{model: desc, ds: o.ds, gpu: o.gpu, fp8Desc: fp8Description(o.gradFP8)}
	nHP, largest := p.countParams(params)
	if p.n == 0 {
		return nil, errors.New("the model has no parameters")
	}
	if err := p.predict(o, params); err != nil {
		return nil, err
	}
	cfg := o.cfg
	if cfg.Rule == optimizer.RuleNone {
		cfg.Rule = optimizer.RuleAdamW
	}
	if err := p.gradientAlternative(o, params); err != nil {
		return nil, err
	}
	p.setClosedForm(o, cfg, nHP, largest)
	p.config = planDescription(o, cfg)
	return p, nil
}

// countParams sets p.n and p.nFP8 and returns the number of
// high-precision parameters and the largest tensor's size.
func (p *memoryPlan) countParams(params []optimizer.Param) (nHP, largest int64) {
	for _, q := range params {
		k := int64(1)
		for _, s := range q.Shape {
			k *= int64(s)
		}
		p.n += k
		largest = max(largest, k)
		if q.HighPrecision {
			nHP += k
		}
	}
	p.nFP8 = p.n - nHP
	return nHP, largest
}

// predict fills the memory report, the collective scratch and the FP8
// gradient memory of every d of the plan.
func (p *memoryPlan) predict(o planOptions, params []optimizer.Param) error {
	for i, d := range o.ds {
		o.progress.Report(int64(i), int64(len(o.ds)))
		world, err := o.shardWorld(d)
		if err != nil {
			return err
		}
		r, err := optimizer.PredictMemory(params, world, o.cfg)
		if err != nil {
			return fmt.Errorf("d=%d: %w", d, err)
		}
		s, err := commScratch(params, world, o.cfg, o)
		if err != nil {
			return fmt.Errorf("d=%d: %w", d, err)
		}
		m, err := fp8Memory(params, world, o.cfg, o.gradFP8)
		if err != nil {
			return fmt.Errorf("d=%d: %w", d, err)
		}
		p.reports, p.scratch, p.fp8 = append(p.reports, r), append(p.scratch, s), append(p.fp8, m)
	}
	o.progress.Report(int64(len(o.ds)), int64(len(o.ds)))
	return nil
}

// setClosedForm sets the plan's closed form of bytes per parameter at d
// and its formula as text.
func (p *memoryPlan) setClosedForm(o planOptions, cfg optimizer.Config, nHP, largest int64) {
	hp := float64(cfg.HighPrecisionType.Size())
	g, gShard, gForm := gradientClosedForm(cfg, float64(cfg.GradType.Size()), p.n, largest)
	m, _ := momentBytes(cfg)
	weights := (float64(p.nFP8) + hp*float64(nHP)) / float64(p.n)
	f8, f8Form := fp8ClosedForm(cfg, o.gradFP8, p.n, largest)
	p.fp8Closed = func(int) float64 { return f8 }
	if o.gradFP8 != nil && cfg.ShardedGradients {
		p.fp8Closed, f8Form = p.fp8PoolTerms(o.gradFP8)
	}
	p.closedForm = func(d int) float64 {
		w, _ := o.shardWorld(d)
		return weights + g + p.fp8Closed(d) + (gShard+4+m)/float64(w)
	}
	if f8Form != "" {
		gForm += " + " + f8Form
	}
	w, sharded := strconv.FormatFloat(weights, 'g', 4, 64), strconv.FormatFloat(gShard+4+m, 'g', 6, 64)
	p.formula = fmt.Sprintf("%s + %s + %s/d", w, gForm, sharded)
	if o.group > 0 {
		p.formula = fmt.Sprintf("%s + %s + %s/min(d, %d)", w, gForm, sharded, o.group)
	}
}

// fp8PoolTerms returns the FP8 gradient terms per parameter at each d of
// the plan, and their text, with sharded gradients: the device pool keeps
// a wire buffer for each bucket size in flight (fp8grad.PredictSteps), so
// its staging has no closed form; the exact figure of each d is taken.
func (p *memoryPlan) fp8PoolTerms(fc *fp8grad.Config) (func(d int) float64, string) {
	at := map[int]float64{}
	for i, d := range p.ds {
		at[d] = float64(p.fp8[i].Staging+p.fp8[i].Residual) / float64(p.n)
	}
	form := strconv.FormatFloat(at[p.ds[0]], 'g', 3, 64) + " (FP8 staging, a buffer per bucket size in flight"
	if fc.ErrorFeedback {
		form += ", and the residuals"
	}
	return func(d int) float64 { return at[d] }, form + ")"
}

// planDescription is the configuration line of the plan: rule, recipe,
// gradient, moment and high-precision types, and the gradient average.
func planDescription(o planOptions, cfg optimizer.Config) string {
	rule := "AdamW"
	if cfg.Rule == optimizer.RuleSGD {
		rule = "SGD with momentum"
	}
	avg := "NCCL's Avg, no scratch"
	if o.exactAvg && cfg.GradType == buffer.BFloat16 {
		avg = "exact Avg, gradients widened to float32 in NCCL scratch"
	}
	if o.gradFP8 != nil {
		avg = fp8Description(o.gradFP8)
	}
	recipe := cfg.Recipe
	if recipe.Scaling == fp8.TensorDelayed && recipe.HistoryLen == 0 {
		recipe.HistoryLen = fp8.DefaultHistoryLen
	}
	grads := cfg.GradType.String()
	if cfg.ShardedGradients {
		grads += " sharded"
	}
	_, mnames := momentBytes(cfg)
	return fmt.Sprintf("%s, %v, gradients %v, moments %v, high-precision copies %v, %s",
		rule, recipe, grads, mnames, cfg.HighPrecisionType, avg)
}

// shardWorld is the number of ranks the state is sharded over at d: d,
// or with -group G, G (the state is sharded within each group of G ranks
// and replicated across the d/G groups; below G, flat).
func (o planOptions) shardWorld(d int) (int, error) {
	if o.group <= 0 || d <= o.group {
		return d, nil
	}
	if d%o.group != 0 {
		return 0, fmt.Errorf("d=%d is not a multiple of -group %d", d, o.group)
	}
	return o.group, nil
}

// commScratch is the scratch memory the NCCL communicator
// (collective/nccl) holds for the step's collectives of the optimizer of
// cfg on d ranks. Only the gradient reduce-scatter needs any: with
// ExactAvg and bfloat16 gradients each bucket is widened to float32 (each
// region aligned to 256 bytes); every other collective of the step (Avg
// without ExactAvg, integer Max and Sum, byte gathers, and the all-to-alls
// of -grad-fp8) runs in place with none. With full gradient buffers Step
// reduce-scatters every bucket in one group, whose scratch holds them all;
// with sharded gradients each bucket is a group of its own, started in the
// backward order, and the communicator's one scratch area grows to the
// largest (ncclScratchHeld). Full gradient buffers reduced as each bucket
// is ready (GradReady) start one group per bucket too: the figure is the
// larger of the two ways. On one rank the in-place reduce-scatters of full
// gradient buffers plan nothing (collective/nccl), so they need none.
func commScratch(params []optimizer.Param, d int, cfg optimizer.Config, o planOptions) (int64, error) {
	if !o.exactAvg || o.gradFP8 != nil || (cfg.GradType != 0 && cfg.GradType != buffer.BFloat16) || (d == 1 && !cfg.ShardedGradients) {
		return 0, nil
	}
	l, err := planLayout(params, d, cfg)
	if err != nil {
		return 0, err
	}
	var n int64
	var needs []int64 // one group per bucket, backward order
	for b := len(l.Buckets) - 1; b >= 0; b-- {
		need := (4*int64(l.Buckets[b].Size) + 255) / 256 * 256
		n += need
		needs = append(needs, need)
	}
	if cfg.ShardedGradients {
		return ncclScratchHeld(needs), nil
	}
	return max(n, ncclScratchHeld(needs)), nil
}

// ncclScratchHeld is the device memory a collective/nccl communicator holds
// for scratch after groups needing needs bytes, in order: its area grows
// when a group needs more, to the larger of the need and 1.5 times the
// area, and the smaller area is kept (retired, not freed: groups queued
// before may use it) until Close.
func ncclScratchHeld(needs []int64) int64 {
	var area, held int64
	for _, n := range needs {
		if n <= area {
			continue
		}
		area = max(n, area+area/2)
		held += area
	}
	return held
}

// write prints the per-buffer table and the comparison table.
func (p *memoryPlan) write(w io.Writer, bytes bool) {
	unit := "GiB (2^30 bytes)"
	if bytes {
		unit = "bytes"
	}
	fmt.Fprintf(w, "model:     %s\n", p.model)
	fmt.Fprintf(w, "           %d parameters: %d gathered in FP8, %d in high precision\n", p.n, p.nFP8, p.n-p.nFP8)
	fmt.Fprintf(w, "optimizer: %s\n\n", p.config)
	fmt.Fprintf(w, "distopt, memory per rank in %s\n", unit)
	cell := func(v float64) string {
		if bytes {
			return strconv.FormatFloat(v, 'f', 0, 64)
		}
		return strconv.FormatFloat(v/(1<<30), 'f', 3, 64)
	}
	width := 9
	if bytes {
		width = 14
	}
	row := func(name string, f func(i int) string) {
		fmt.Fprintf(w, "%-34s", name)
		for i := range p.ds {
			fmt.Fprintf(w, " %*s", width, f(i))
		}
		fmt.Fprintln(w)
	}
	row("buffer", func(i int) string { return fmt.Sprintf("d=%d", p.ds[i]) })
	var host []string
	for _, b := range p.reports[0].Buffers {
		if b.Host {
			host = append(host, b.Name)
			continue
		}
		row(b.Name, func(i int) string { return cell(float64(p.reports[i].Get(b.Name))) })
	}
	row("nccl scratch", func(i int) string { return cell(float64(p.scratch[i])) })
	if p.fp8Desc != "" {
		row(rowFP8Staging, func(i int) string { return cell(float64(p.fp8[i].Staging)) })
		row(rowFP8Residual, func(i int) string { return cell(float64(p.fp8[i].Residual)) })
	}
	row("total (device)", func(i int) string { return cell(float64(p.total(i))) })
	row("  of which padding", func(i int) string { return cell(float64(p.padding(i))) })
	if p.gpu.Bytes > 0 {
		row(fmt.Sprintf("fits %s (%.2f GiB)", p.gpu.Name, float64(p.gpu.Bytes)/(1<<30)), func(i int) string {
			if p.fits(i) {
				return "yes"
			}
			return "NO"
		})
	}
	for _, name := range host {
		row(name+" (host)", func(i int) string { return cell(float64(p.reports[i].Get(name))) })
	}
	row("bytes per parameter", func(i int) string { return fmt.Sprintf("%.3f", float64(p.total(i))/float64(p.n)) })
	row("closed form "+p.formula, func(i int) string { return fmt.Sprintf("%.3f", p.closedForm(p.ds[i])) })

	fmt.Fprintf(w, "\ncomparison, memory per rank in GiB, from each configuration's bytes per parameter\n")
	fmt.Fprint(w, comparisonTable(p.n, p.ds, p.gpu.Bytes))
	fmt.Fprintf(w, rowFormat(), "distopt, this configuration (exact)", "as above")
	for i := range p.ds {
		fmt.Fprint(w, " "+gibCell(float64(p.total(i)), p.gpu.Bytes))
	}
	fmt.Fprintln(w)
	p.writeAlternative(w)
	if p.gpu.Bytes > 0 {
		fmt.Fprintf(w, "* more than the %.2f GiB of %s, before activations, the CUDA context and the framework's caches\n", float64(p.gpu.Bytes)/(1<<30), p.gpu.Name)
	}
}

// fits reports whether the device memory of d = ds[i] fits the GPU.
func (p *memoryPlan) fits(i int) bool { return p.total(i) <= p.gpu.Bytes }

// warn writes a warning naming every d whose device memory does not fit
// the GPU (nothing without a GPU, or when every d fits).
func (p *memoryPlan) warn(w io.Writer) {
	if p.gpu.Bytes == 0 {
		return
	}
	var over []string
	for i, d := range p.ds {
		if !p.fits(i) {
			over = append(over, fmt.Sprintf("d=%d (%.2f GiB)", d, float64(p.total(i))/(1<<30)))
		}
	}
	if len(over) > 0 {
		fmt.Fprintf(w, "distopt plan: warning: this configuration does not fit the %.2f GiB of %s at %s per rank, before activations\n",
			float64(p.gpu.Bytes)/(1<<30), p.gpu.Name, strings.Join(over, ", "))
	}
}

// total is the device memory of d = ds[i]: the optimizer's buffers, the
// NCCL scratch and the FP8 gradient staging and residuals.
func (p *memoryPlan) total(i int) int64 {
	return p.reports[i].Total() + p.scratch[i] + p.fp8[i].Staging + p.fp8[i].Residual
}

// padding is the optimizer's device memory beyond the closed form over the
// unpadded parameters and beyond the scales: the padding of buckets and
// shards (rounded to whole bytes; it can come out a byte below 0 when the
// closed form's n/d is fractional).
func (p *memoryPlan) padding(i int) int64 {
	r := p.reports[i]
	scales := r.Get(optimizer.BufScales) + r.Get(optimizer.BufBlockScales)
	exact := (p.closedForm(p.ds[i]) - p.fp8Closed(p.ds[i])) * float64(p.n)
	return r.Total() - scales - int64(exact+0.5)
}
