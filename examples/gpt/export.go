package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/safetensors"
)

// exportInit writes the initial weights (float32, exactly the values
// optimizer.New starts from) as one safetensors file at path, in the order
// of Config.Params, with the shape, the loader's settings and the
// reference loss in its metadata (unless o.exportCheck is false): the
// float64 loss of the CPU model with these weights on micro-batch 0 of
// rank 0 at step 0. A reference
// implementation (scripts/gpt/torch_gpt.py --check) loads the file, draws
// the same batch and must find the same loss.
func exportInit(o options, path string, out io.Writer) error {
	c, err := readCorpus(o.data, o.shape.Vocab)
	if err != nil {
		return err
	}
	loader := data.Loader{Tokens: c.train, Seq: o.shape.Seq, Batch: o.batch, World: o.ranks, MicroBatches: o.micro, Seed: o.seed}
	if err := loader.Validate(); err != nil {
		return err
	}
	m, err := model.NewCPU(o.shape)
	if err != nil {
		return err
	}
	meta := map[string]string{}
	if o.exportCheck {
		n := o.batch * o.shape.Seq
		in, tg := make([]int32, n), make([]int32, n)
		loader.MicroBatch(in, tg, 0, 0, 0)
		a, err := m.Forward(in, tg, o.batch, o.shape.Seq)
		if err != nil {
			return err
		}
		meta["reference_loss"] = strconv.FormatFloat(a.Loss, 'g', 17, 64)
	}
	params := o.shape.Params()
	specs := make([]safetensors.Spec, len(params))
	for i, p := range params {
		specs[i] = safetensors.Spec{Name: p.Name, DType: safetensors.F32, Shape: p.Shape}
	}
	for k, v := range map[string]int{"layers": o.shape.Layers, "hidden": o.shape.Hidden, "heads": o.shape.Heads, "ffn": o.shape.FFN,
		"vocab": o.shape.Vocab, "seq": o.shape.Seq, "batch": o.batch, "micro": o.micro, "world": o.ranks} {
		meta[k] = strconv.Itoa(v)
	}
	meta["seed"] = strconv.FormatUint(o.seed, 10)
	_, head, err := safetensors.Encode(specs, meta)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	body := head
	for _, p := range params {
		for _, v := range m.W[p.Name] { // float64 copies of float32 values: exact
			body = binary.LittleEndian.AppendUint32(body, math.Float32bits(float32(v)))
		}
	}
	_, err = f.Write(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s: %d parameters", path, o.shape.NumParams())
	if l, ok := meta["reference_loss"]; ok {
		fmt.Fprintf(out, "; reference loss of step 0, rank 0, micro-batch 0: %s", l)
	}
	fmt.Fprintln(out)
	return nil
}
