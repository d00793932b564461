package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/safetensors"
)

// writeSeedsEnv, when set, makes TestFuzzSeeds write the seed corpora
// of the fuzz targets under testdata/fuzz from a checkpoint it saves.
const writeSeedsEnv = "DISTOPT_WRITE_FUZZ_SEEDS"

// seedFiles are the committed seed corpus files made from a small real
// checkpoint, by fuzz target: its index, its latest pointer, and rank 1's
// shard file (chunks of 64 bytes) with the tensor and range to read.
var seedFiles = map[string]string{
	"FuzzIndex":       "testdata/fuzz/FuzzIndex/saved",
	"FuzzLatest":      "testdata/fuzz/FuzzLatest/saved",
	"FuzzShardChunks": "testdata/fuzz/FuzzShardChunks/saved",
}

// TestFuzzSeeds checks that the committed seeds are a checkpoint this
// reader accepts (the index parses, the latest pointer names a step, the
// shard file opens), so that fuzzing starts from valid files. With
// DISTOPT_WRITE_FUZZ_SEEDS set it first writes them: a checkpoint of two
// small parameters on two ranks under delayed scaling.
func TestFuzzSeeds(t *testing.T) {
	if os.Getenv(writeSeedsEnv) != "" {
		writeFuzzSeeds(t)
	}
	seed := func(name string) []byte {
		raw, err := os.ReadFile(seedFiles[name])
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(raw), "\n")
		b, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if len(lines) < 2 || lines[0] != "go test fuzz v1" || err != nil {
			t.Fatalf("%s is not a corpus file of a []byte first: %v", seedFiles[name], err)
		}
		return []byte(b)
	}
	if _, _, err := parseIndex(seed("FuzzIndex"), indexName, "fuzz"); err != nil {
		t.Errorf("the index seed: %v (rewrite the seeds with %s=1)", err, writeSeedsEnv)
	}
	if _, err := parseLatest(seed("FuzzLatest")); err != nil {
		t.Errorf("the latest seed: %v", err)
	}
	file := seed("FuzzShardChunks")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "shard"), file, 0o644)
	if s, err := openShard(dir, fileRecord{Name: "shard", Size: int64(len(file)), HeaderSHA256: headerSum(file)}); err != nil {
		t.Errorf("the shard seed: %v", err)
	} else {
		s.Close()
	}
}

// writeFuzzSeeds saves a small checkpoint and writes its files as the
// seed corpora of seedFiles.
func writeFuzzSeeds(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{4, 40}}, {Name: "b", Shape: []int{8}, HighPrecision: true}}
	cfg := optimizer.Config{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 3}}
	root := t.TempDir()
	c := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	c.train(0, 2)
	c.save(root, SaveOptions{ChunkBytes: 64})
	for name, extra := range map[string]string{"FuzzIndex": "", "FuzzLatest": "", "FuzzShardChunks": "uint8(0)\nuint16(0)\nuint16(40)\n"} {
		src := map[string]string{"FuzzIndex": filepath.Join(stepDirName(2), indexName), "FuzzLatest": latestName,
			"FuzzShardChunks": filepath.Join(stepDirName(2), shardName(1, 2))}[name]
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(seedFiles[name]), 0o755)
		if err := os.WriteFile(seedFiles[name], []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n%s", b, extra)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// isCheckpointError reports whether err carries one of the package's
// sentinels, as every error of a reader must.
func isCheckpointError(err error) bool {
	for _, s := range codes {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// FuzzIndex (seeds also in testdata/fuzz) parses arbitrary index.json
// bytes: no panic; an error carries a sentinel; an accepted index encodes
// to bytes that parse back to an index encoding to the same bytes.
func FuzzIndex(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format":"distopt-checkpoint","version":1,"body_sha256":"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","body":{}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		idx, _, err := parseIndex(raw, indexName, "fuzz")
		if err != nil {
			if !isCheckpointError(err) {
				t.Fatalf("error without a sentinel: %v", err)
			}
			return
		}
		once, err := encodeIndex(idx)
		if err != nil {
			t.Fatal(err)
		}
		again, _, err := parseIndex(once, indexName, "fuzz")
		if err != nil {
			t.Fatalf("an accepted index, encoded again, is refused: %v", err)
		}
		twice, _ := encodeIndex(again)
		if !bytes.Equal(once, twice) {
			t.Fatalf("encoding is not a fixed point:\n%s\n%s", once, twice)
		}
	})
}

// FuzzLatest parses arbitrary latest pointers: an accepted one names a
// step directory (not a staging one) inside the root.
func FuzzLatest(f *testing.F) {
	for _, s := range []string{"", "step-00000002.tmp\n", "../step-00000001", "step-1", " step-99999999999999999999 \n", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := parseLatest(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error without ErrCorrupt: %v", err)
			}
			return
		}
		m := stepDirRE.FindStringSubmatch(name)
		if m == nil || m[2] != "" || filepath.Base(name) != name || strings.ContainsAny(name, "/\\ \n") {
			t.Fatalf("accepted %q as a step directory", name)
		}
	})
}

// headerSum is the SHA-256 of a safetensors file's length prefix and
// header (what the index records), or of the whole file when the prefix
// does not fit.
func headerSum(file []byte) string {
	if len(file) < 8 {
		return sha256Hex(file)
	}
	n := binary.LittleEndian.Uint64(file)
	if n > uint64(len(file)-8) {
		return sha256Hex(file)
	}
	return sha256Hex(file[:8+n])
}

// FuzzShardChunks checks arbitrary shard file bytes (in memory) as a
// hostile file that its index describes faithfully (size and header
// checksum), and reads a range of one of its tensors as Load does. No panic; an error carries a
// sentinel; a read that succeeds returns the bytes of the file decoded
// directly, and every chunk it touched matches its recorded CRC-32C.
func FuzzShardChunks(f *testing.F) {
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"), uint8(0), uint16(0), uint16(1))
	f.Fuzz(func(t *testing.T, file []byte, k uint8, from, n uint16) {
		rec := fileRecord{Name: "shard", Size: int64(len(file)), HeaderSHA256: headerSum(file)}
		s, err := checkShard(bytes.NewReader(file), int64(len(file)), "shard", rec)
		if err != nil {
			if !isCheckpointError(err) {
				t.Fatalf("open: error without a sentinel: %v", err)
			}
			return
		}
		if len(s.h.Tensors) == 0 {
			return
		}
		h := s.h.Tensors[int(k)%len(s.h.Tensors)]
		if len(h.Shape) != 1 || (h.DType != safetensors.F32 && h.DType != safetensors.BF16) {
			return
		}
		tt, err := s.tensor(h.Name, h.DType, h.Shape[0])
		if err != nil {
			if !isCheckpointError(err) {
				t.Fatalf("tensor: error without a sentinel: %v", err)
			}
			return
		}
		lo := min(int(from), h.Shape[0])
		hi := min(lo+int(n), h.Shape[0])
		esz := int64(h.DType.Size())
		begin, end := tt.Begin+int64(lo)*esz, tt.Begin+int64(hi)*esz
		got := make([]float32, hi-lo)
		err = readRequests(s, []request{{begin: begin, end: end, dt: h.DType, dst: got}})
		if err != nil {
			if !isCheckpointError(err) {
				t.Fatalf("read: error without a sentinel: %v", err)
			}
			return
		}
		want := make([]float32, hi-lo)
		decodeValues(want, file[s.h.DataOffset+begin:s.h.DataOffset+end], h.DType)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("element %d of %s: read %x, the file holds %x", lo+i, h.Name, math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
		if begin < end {
			data := file[s.h.DataOffset:]
			for c := begin / s.chunk; c <= (end-1)/s.chunk; c++ {
				a, b := c*s.chunk, min((c+1)*s.chunk, int64(len(data)))
				if crc32c(data[a:b]) != s.sums[c] {
					t.Fatalf("chunk %d was read although its CRC-32C differs", c)
				}
			}
		}
	})
}
