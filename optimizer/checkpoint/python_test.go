package checkpoint

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distopt/distopt/optimizer"
)

type pyTensor struct {
	DType  string    `json:"dtype"`
	Shape  []int     `json:"shape"`
	Values []float64 `json:"values"`
}

type pyExpect struct {
	SHA256   string              `json:"sha256,omitempty"`
	Metadata map[string]string   `json:"metadata"`
	Tensors  map[string]pyTensor `json:"tensors"`
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// runPython runs testdata/read_safetensors.py on file against want and
// returns its output and whether it succeeded.
func runPython(t *testing.T, python, file string, want pyExpect) (string, bool) {
	t.Helper()
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(t.TempDir(), "expected.json")
	if err := os.WriteFile(exp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, filepath.Join("testdata", "read_safetensors.py"), file, exp).CombinedOutput()
	return string(out), err == nil
}

// TestPythonReader reads a shard file (F32 masters, BF16 moments) and an
// export with an independent safetensors reader in Python, checking every
// value, the metadata and the SHA-256 the index records. It is skipped
// where python3 is not installed.
func TestPythonReader(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	params, cfg := testParams(), testConfigs()["bf16 moments, loss scaler, delayed most-recent"]
	root := t.TempDir()
	c := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	c.train(0, 3)
	info := c.save(root, SaveOptions{ChunkBytes: 4096})
	idx, _, err := readIndex(info.Dir)
	if err != nil {
		t.Fatal(err)
	}
	pieces, err := c.opts[1].ReadPieces()
	if err != nil {
		t.Fatal(err)
	}
	shard := pyExpect{SHA256: idx.Files[1].SHA256, Tensors: map[string]pyTensor{},
		Metadata: map[string]string{"distopt.format": formatName, "distopt.rank": "1", "distopt.world": "2"}}
	for _, p := range pieces {
		base := tensorBase(p.Param, p.Offset)
		shard.Tensors[base+"/master"] = pyTensor{"F32", []int{len(p.Master)}, widen(p.Master)}
		shard.Tensors[base+"/m"] = pyTensor{"BF16", []int{len(p.M)}, widen(p.M)}
		shard.Tensors[base+"/v"] = pyTensor{"BF16", []int{len(p.V)}, widen(p.V)}
	}
	file := filepath.Join(info.Dir, idx.Files[1].Name)
	if out, ok := runPython(t, python, file, shard); !ok || !strings.HasPrefix(out, "ok") {
		t.Fatalf("python reader on %s:\n%s", file, out)
	}
	// The reader must notice a wrong value.
	for name, tn := range shard.Tensors {
		tn.Values = append([]float64(nil), tn.Values...)
		tn.Values[len(tn.Values)-1] += 1
		shard.Tensors[name] = tn
		break
	}
	if out, ok := runPython(t, python, file, shard); ok {
		t.Fatalf("python reader accepted a wrong value:\n%s", out)
	}

	export := filepath.Join(t.TempDir(), "model.safetensors")
	c.must(c.export(export))
	st := c.snapshot()
	full := pyExpect{Tensors: map[string]pyTensor{}, Metadata: map[string]string{"format": "pt"}}
	for _, p := range params {
		shape := p.Shape
		if shape == nil {
			shape = []int{}
		}
		full.Tensors[p.Name] = pyTensor{"F32", shape, widen(st.master[p.Name])}
	}
	if out, ok := runPython(t, python, export, full); !ok || !strings.HasPrefix(out, "ok") {
		t.Fatalf("python reader on the export:\n%s", out)
	}
}
