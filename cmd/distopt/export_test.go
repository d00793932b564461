package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
	"github.com/distopt/distopt/plan"
)

// testCheckpoint saves a small Llama-style model on 2 in-process ranks
// and returns the checkpoint root.
func testCheckpoint(t *testing.T) string {
	t.Helper()
	params := plan.LlamaConfig{Layers: 1, Hidden: 64, FFN: 160, Vocab: 300, Heads: 4, KVHeads: 2}.Params()
	init := func(name string, offset int, dst []float32) error {
		for i := range dst {
			dst[i] = float32((offset+i)%97-48) / 256
		}
		return nil
	}
	root := t.TempDir()
	comms := inproc.Communicators(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, comm := range comms {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o, err := optimizer.New(ctx, comm, cpu.New(1), params, init, optimizer.Config{})
			if err == nil {
				_, err = checkpoint.Save(ctx, o, comm, root, checkpoint.SaveOptions{})
				o.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		comms[r].Close()
	}
	return root
}

// TestExportCommand checks that `distopt export` writes the same files as
// checkpoint.ExportHF with the options its flags name.
func TestExportCommand(t *testing.T) {
	root := testCheckpoint(t)
	for _, tc := range []struct {
		args []string
		opts checkpoint.HFOptions
	}{
		{nil, checkpoint.HFOptions{}},
		{[]string{"-dtype", "fp8", "-shard-size", "100kB"}, checkpoint.HFOptions{DType: checkpoint.HFFP8, MaxShardBytes: 100_000}},
		{[]string{"-dtype", "FP8", "-format", "e5m2", "-per-tensor", "-keep", "embed"}, checkpoint.HFOptions{DType: checkpoint.HFFP8, Format: 2, PerTensor: true,
			Keep: func(name string) bool { return strings.Contains(name, "embed") }}},
	} {
		got, want := t.TempDir(), t.TempDir()
		var out, errb bytes.Buffer
		if code := runExport(append(tc.args, root, got), &out, &errb); code != 0 {
			t.Fatalf("%q: exit %d: %s", tc.args, code, errb.String())
		}
		if _, err := checkpoint.ExportHF(root, want, tc.opts); err != nil {
			t.Fatal(err)
		}
		names, _ := filepath.Glob(filepath.Join(want, "*"))
		if len(names) < 2 {
			t.Fatalf("%q: ExportHF wrote %v", tc.args, names)
		}
		for _, w := range names {
			a, _ := os.ReadFile(w)
			b, err := os.ReadFile(filepath.Join(got, filepath.Base(w)))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("%q: %s differs from ExportHF's (%v)", tc.args, filepath.Base(w), err)
			}
		}
		if !strings.Contains(out.String(), "exported step 0") {
			t.Errorf("%q: stdout %q", tc.args, out.String())
		}
	}
}

func TestExportUsageErrors(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{root}, 2, "CHECKPOINT and OUTDIR are required"},
		{[]string{"-dtype", "int4", root, "x"}, 2, "want bf16, fp8 or f32"},
		{[]string{"-format", "e3m4", root, "x"}, 2, "want e4m3 or e5m2"},
		{[]string{"-shard-size", "lots", root, "x"}, 2, "5GB"},
		{[]string{"-keep", "(", root, "x"}, 2, "-keep"},
		{[]string{root, filepath.Join(root, "out")}, 1, "no checkpoint"},
	} {
		var out, errb bytes.Buffer
		if code := runExport(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
