package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/checkpoint"
	"github.com/distopt/distopt/plan"
)

func init() {
	commands["export"] = command{summary: "write a checkpoint's model as Hugging Face safetensors (BF16 or FP8)", run: exportCommand}
}

// exportOptions are the arguments of `distopt export`.
type exportOptions struct {
	checkpoint, dir string
	hf              checkpoint.HFOptions
	as              string // "gpt2": examples/gpt's model as transformers' GPT-2 (export_gpt2.go)
	heads           int    // attention heads of -as gpt2
}

// exportCommand is `distopt export`.
func exportCommand(args []string) int { return runExport(args, os.Stdout, os.Stderr) }

// runExport parses args, exports and returns the exit status: 0, 1 when
// the export fails, 2 for invalid arguments.
func runExport(args []string, stdout, stderr io.Writer) int {
	o, err := parseExport(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "distopt export: %v\n", err)
		return 2
	}
	if o.as == "gpt2" {
		step, err := exportGPT2(o.checkpoint, o.dir, o.heads, o.hf.DType)
		if err != nil {
			fmt.Fprintf(stderr, "distopt export: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "exported step %d to %s as GPT-2 (%s): model.safetensors and config.json, for transformers' GPT2LMHeadModel.from_pretrained\n", step, o.dir, o.hf.DType)
		return 0
	}
	o.hf.Progress = checkpoint.TerminalProgress("exporting")
	info, err := checkpoint.ExportHF(o.checkpoint, o.dir, o.hf)
	if err != nil {
		fmt.Fprintf(stderr, "distopt export: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "exported step %d to %s: %d files, %d bytes of tensors, %s\n", info.Step, o.dir, len(info.Files), info.TotalSize, o.hf.DType)
	if o.hf.DType == checkpoint.HFFP8 {
		fmt.Fprintf(stdout, "%d weights in FP8; put the object of %s under \"quantization_config\" in the model's config.json\n", len(info.FP8), checkpoint.HFQuantConfigName)
	}
	return 0
}

// parseExport parses the arguments of `distopt export`.
func parseExport(args []string, stderr io.Writer) (exportOptions, error) {
	var o exportOptions
	fs := flag.NewFlagSet("distopt export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dtype := fs.String("dtype", "bf16", "bf16, fp8 (linear layers' weights in FP8 with scales, the rest BF16) or f32")
	format := fs.String("format", "e4m3", "FP8 format of -dtype fp8: e4m3 or e5m2")
	fs.BoolVar(&o.hf.PerTensor, "per-tensor", false, "-dtype fp8 with one scale per weight (weight_scale, vLLM) instead of 128x128 blocks (weight_scale_inv, DeepSeek-V3)")
	shard := fs.String("shard-size", "5GB", "most bytes of tensors per file (5GB, 500MB, or bytes)")
	keep := fs.String("keep", checkpoint.DefaultHFKeep.String(), "with -dtype fp8, a regular expression of the matrices kept in BF16")
	fs.StringVar(&o.as, "as", "", "gpt2: write examples/gpt's model as Hugging Face transformers' GPT-2 (GPT-2's names and Conv1D layout, config.json; -dtype f32 or bf16)")
	fs.IntVar(&o.heads, "heads", 0, "attention heads of the model, for -as gpt2's config.json (examples/gpt's -heads or its preset's: tiny 1, small 12, 1.3b 16)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: distopt export [-dtype bf16|fp8|f32] [-format e4m3|e5m2] [-per-tensor] [-shard-size 5GB] [-keep REGEXP] CHECKPOINT OUTDIR")
		fmt.Fprintln(fs.Output(), "       distopt export -as gpt2 -heads N [-dtype f32|bf16] CHECKPOINT OUTDIR")
		fmt.Fprintln(fs.Output(), "\nCHECKPOINT is a checkpoint directory or a root with a \"latest\" pointer; OUTDIR receives model-*.safetensors and model.safetensors.index.json.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if fs.NArg() != 2 {
		return o, fmt.Errorf("CHECKPOINT and OUTDIR are required, got %q", fs.Args())
	}
	o.checkpoint, o.dir = fs.Arg(0), fs.Arg(1)
	switch strings.ToLower(*dtype) {
	case "bf16", "bfloat16":
		o.hf.DType = checkpoint.HFBF16
	case "fp8":
		o.hf.DType = checkpoint.HFFP8
	case "f32", "fp32", "float32":
		o.hf.DType = checkpoint.HFF32
	default:
		return o, fmt.Errorf("-dtype=%q: want bf16, fp8 or f32", *dtype)
	}
	switch strings.ToLower(*format) {
	case "e4m3", "e4m3fn":
		o.hf.Format = fp8.E4M3
	case "e5m2":
		o.hf.Format = fp8.E5M2
	default:
		return o, fmt.Errorf("-format=%q: want e4m3 or e5m2", *format)
	}
	n, err := plan.ParseCount(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(*shard)), "B"))
	if err != nil {
		return o, fmt.Errorf("-shard-size=%q: want bytes such as 5GB, 500MB or 1000000", *shard)
	}
	o.hf.MaxShardBytes = n
	re, err := regexp.Compile(*keep)
	if err != nil {
		return o, fmt.Errorf("-keep: %w", err)
	}
	o.hf.Keep = re.MatchString
	switch {
	case o.as != "" && o.as != "gpt2":
		return o, fmt.Errorf("-as=%q: want gpt2 (or nothing: the checkpoint's own names)", o.as)
	case o.as == "gpt2" && o.heads < 1:
		return o, errors.New("-as gpt2: -heads is required (examples/gpt's -heads, or its preset's: tiny 1, small 12, 1.3b 16)")
	case o.as == "" && o.heads != 0:
		return o, errors.New("-heads is for -as gpt2")
	}
	return o, nil
}
