package main

import (
	"bytes"
	"slices"
	"testing"

	"github.com/distopt/distopt/optimizer"
)

// TestShardedGradsRun runs the synthetic mode on 2 in-process ranks with
// and without -sharded-grads (FP8 first moment, BF16 second moment): the
// sharded run's prediction is PredictMemory's for its configuration (at
// this size the pool of two largest buckets exceeds the full buffer; at
// the 1.42B shape it is far below), and
// its gradient norm and last step's norm equal the unsharded run's bit for
// bit (one micro-batch: reducing the pooled buckets gives the same sums).
func TestShardedGradsRun(t *testing.T) {
	summaryOf := func(extra ...string) summary {
		t.Helper()
		dir := t.TempDir()
		var out, errb bytes.Buffer
		args := append(slices.Clone(smallFlags), "-ranks", "2", "-warmup", "1", "-steps", "2", "-plain-steps", "1",
			"-moments", "fp8,bf16", "-out", dir)
		if code := run(append(args, extra...), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", extra, code, out.String(), errb.String())
		}
		return readSummary(t, dir)
	}
	plain, sharded := summaryOf(), summaryOf("-sharded-grads")
	first, second, err := optimizer.ParseMomentTypes("fp8,bf16", optimizer.RuleAdamW)
	if err != nil {
		t.Fatal(err)
	}
	pred, err := optimizer.PredictMemory(smallGPT.Params(), 2, optimizer.Config{FirstMomentType: first, SecondMomentType: second, ShardedGradients: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range sharded.Ranks {
		if r.Predicted != pred.Total() {
			t.Errorf("rank %d: predicted %d bytes, PredictMemory with sharded gradients %d", r.Rank, r.Predicted, pred.Total())
		}
		if r.GradNorm != plain.Ranks[i].GradNorm {
			t.Errorf("rank %d: gradient norm %v with sharded gradients, %v without", r.Rank, r.GradNorm, plain.Ranks[i].GradNorm)
		}
	}
}

// TestShardedGradsFlags checks the refusal of -sharded-grads with -compute
// gemm (its compute-only pass would need a gradient buffer per bucket).
func TestShardedGradsFlags(t *testing.T) {
	var out, errb bytes.Buffer
	args := append(slices.Clone(smallFlags), "-backend", "gpu", "-compute", "gemm", "-sharded-grads")
	if code := run(args, &out, &errb); code == 0 || !bytes.Contains(errb.Bytes(), []byte("-sharded-grads")) {
		t.Errorf("exit %d, stderr %q: want a refusal naming -sharded-grads", code, errb.String())
	}
}
