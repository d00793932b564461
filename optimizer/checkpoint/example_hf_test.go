package checkpoint_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
)

// Saves a checkpoint on two ranks, then exports it offline as Hugging Face
// safetensors with FP8 weights and 128x128 block scales.
func ExampleExportHF() {
	params := []optimizer.Param{
		{Name: "model.embed_tokens.weight", Shape: []int{100, 64}},
		{Name: "model.layers.0.mlp.up_proj.weight", Shape: []int{200, 64}},
		{Name: "model.norm.weight", Shape: []int{64}, HighPrecision: true},
	}
	init := func(name string, offset int, dst []float32) error {
		for i := range dst {
			dst[i] = float32((offset+i)%29-14) / 256
		}
		return nil
	}
	root, err := os.MkdirTemp("", "distopt-hf")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	onRanks(2, func(ctx context.Context, comm collective.Communicator) error {
		o, err := optimizer.New(ctx, comm, cpu.New(1), params, init, optimizer.Config{})
		if err != nil {
			return err
		}
		defer o.Close()
		_, err = checkpoint.Save(ctx, o, comm, filepath.Join(root, "ckpt"), checkpoint.SaveOptions{})
		return err
	})

	info, err := checkpoint.ExportHF(filepath.Join(root, "ckpt"), filepath.Join(root, "hf"), checkpoint.HFOptions{
		DType:    checkpoint.HFFP8,
		Progress: checkpoint.TerminalProgress("exporting"), // nil, and quiet, when stderr is not a terminal
	})
	if err != nil {
		log.Fatal(err)
	}
	// 100x64 BF16 + 200x64 FP8 + 2x1 float32 scales + 64 BF16 bytes.
	fmt.Println(info.Files, info.TotalSize, "bytes")
	fmt.Println("FP8:", info.FP8)
	// Output:
	// [model-00001-of-00001.safetensors] 25736 bytes
	// FP8: [model.layers.0.mlp.up_proj.weight]
}
