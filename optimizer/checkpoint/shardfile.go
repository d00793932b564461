package checkpoint

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/safetensors"
)

// shardTensor is one tensor of a shard file and its values.
type shardTensor struct {
	name  string
	dtype safetensors.DType
	vals  []float32
}

// shardTensors lists the tensors of a rank's pieces: every master first,
// then every first moment, then every second moment, so that each tensor
// starts at a multiple of its element size and no element straddles a
// chunk. Moments are named by the rule (optimizer.Rule.Moments): "m", "v".
func shardTensors(pieces []optimizer.PieceState, moment buffer.DType, names []string) []shardTensor {
	var out []shardTensor
	for _, p := range pieces {
		out = append(out, shardTensor{tensorBase(p.Param, p.Offset) + "/master", safetensors.F32, p.Master})
	}
	for k, name := range names {
		for _, p := range pieces {
			if m := [][]float32{p.M, p.V}[k]; m != nil {
				out = append(out, shardTensor{tensorBase(p.Param, p.Offset) + "/" + name, fileDType(moment), m})
			}
		}
	}
	return out
}

// writeShard writes rank's shard file into dir atomically and returns its
// record for the index.
func writeShard(dir string, rank, world, step, chunk int, moment buffer.DType, names []string, pieces []optimizer.PieceState, progress Progress) (fileRecord, error) {
	tensors := shardTensors(pieces, moment, names)
	buf := make([]byte, 64<<10)
	sums := &chunkSums{size: chunk}
	specs := make([]safetensors.Spec, len(tensors))
	for i, t := range tensors {
		specs[i] = safetensors.Spec{Name: t.name, DType: t.dtype, Shape: []int{len(t.vals)}}
		if err := writeValues(sums, t.vals, t.dtype, buf); err != nil {
			return fileRecord{}, err
		}
	}
	meta := map[string]string{
		metaFormat:     formatName,
		metaVersion:    strconv.Itoa(FormatVersion),
		metaRank:       strconv.Itoa(rank),
		metaWorld:      strconv.Itoa(world),
		metaStep:       strconv.Itoa(step),
		metaChunkBytes: strconv.Itoa(chunk),
		metaChunkCRC:   encodeSums(sums.finish()),
	}
	h, raw, err := safetensors.Encode(specs, meta)
	if err != nil {
		return fileRecord{}, fmt.Errorf("checkpoint: %w", err)
	}
	if err := hook(stageShardWrite, rank); err != nil {
		return fileRecord{}, err
	}
	final := filepath.Join(dir, shardName(rank, world))
	f, err := os.OpenFile(final+".tmp", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fileRecord{}, fmt.Errorf("checkpoint: %w", err)
	}
	sum := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, sum), 1<<20)
	err = func() error {
		if _, err := w.Write(raw); err != nil {
			return err
		}
		var written int64
		halfDone := false
		for _, t := range tensors {
			if err := writeValues(w, t.vals, t.dtype, buf); err != nil {
				return err
			}
			written += int64(len(t.vals) * t.dtype.Size())
			progress.report(written, h.DataLen)
			if !halfDone && 2*written >= h.DataLen {
				halfDone = true
				if err := w.Flush(); err != nil {
					return err
				}
				if err := hook(stageShardHalf, rank); err != nil {
					return err
				}
			}
		}
		return w.Flush()
	}()
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return fileRecord{}, fmt.Errorf("checkpoint: writing %s: %w", f.Name(), err)
	}
	if err := commitFile(f, final, stageShardRename, rank); err != nil {
		return fileRecord{}, err
	}
	return fileRecord{
		Name:         filepath.Base(final),
		Rank:         rank,
		Size:         h.Size(),
		SHA256:       hex.EncodeToString(sum.Sum(nil)),
		HeaderSHA256: sha256Hex(raw),
	}, nil
}

// shardFile is an open shard file whose header has been verified.
type shardFile struct {
	path  string
	f     io.ReaderAt
	c     io.Closer // the file f reads, nil when not a file
	h     *safetensors.Header
	chunk int64
	sums  []uint32
	read  *meter // counts the bytes readRequests decodes; nil: none
}

// openShard opens the file rec of a checkpoint directory and checks its
// size, its header against the recorded checksum, and its metadata.
func openShard(dir string, rec fileRecord) (*shardFile, error) {
	path := filepath.Join(dir, rec.Name)
	f, err := openRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, ErrMissingFile)
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	s, err := checkShard(f, st.Size(), path, rec)
	if err != nil {
		f.Close()
		return nil, err
	}
	s.c = f
	return s, nil
}

// checkShard checks the shard file of size bytes that f reads, at path,
// against its record: its size, its header's checksum, its metadata.
func checkShard(f io.ReaderAt, size int64, path string, rec fileRecord) (*shardFile, error) {
	switch {
	case size < rec.Size:
		return nil, fmt.Errorf("checkpoint: %s has %d bytes, the index records %d: %w", path, size, rec.Size, ErrTruncated)
	case size > rec.Size:
		return nil, fmt.Errorf("checkpoint: %s has %d bytes, the index records %d: %w", path, size, rec.Size, ErrChecksum)
	}
	h, raw, err := safetensors.Read(f, rec.Size)
	if err != nil {
		// The size is as recorded, so the header bytes differ from those written.
		return nil, fmt.Errorf("checkpoint: %s: %v: %w", path, err, ErrChecksum)
	}
	if got := sha256Hex(raw); got != rec.HeaderSHA256 {
		return nil, fmt.Errorf("checkpoint: %s: header checksum %s, recorded %s: %w", path, got, rec.HeaderSHA256, ErrChecksum)
	}
	if h.Metadata[metaFormat] != formatName {
		return nil, fmt.Errorf("checkpoint: %s is not a distopt shard file: %w", path, ErrCorrupt)
	}
	chunk, err := strconv.ParseInt(h.Metadata[metaChunkBytes], 10, 64)
	if err != nil || chunk < 8 || chunk%8 != 0 || chunk > MaxChunkBytes {
		return nil, fmt.Errorf("checkpoint: %s: chunk size %q: %w", path, h.Metadata[metaChunkBytes], ErrCorrupt)
	}
	sums, err := decodeSums(h.Metadata[metaChunkCRC], int((h.DataLen+chunk-1)/chunk))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return &shardFile{path: path, f: f, h: h, chunk: chunk, sums: sums}, nil
}

// Close closes the file (nothing when the shard was checked from memory).
func (s *shardFile) Close() error {
	if s.c == nil {
		return nil
	}
	return s.c.Close()
}

// tensor returns the named tensor, checking that it holds n elements of
// type dt starting at a multiple of the element size.
func (s *shardFile) tensor(name string, dt safetensors.DType, n int) (safetensors.Tensor, error) {
	t, ok := s.h.Lookup(name)
	if !ok {
		return t, fmt.Errorf("checkpoint: %s has no tensor %q: %w", s.path, name, ErrCorrupt)
	}
	if t.DType != dt || len(t.Shape) != 1 || t.Shape[0] != n || t.Begin%int64(dt.Size()) != 0 {
		return t, fmt.Errorf("checkpoint: %s: tensor %q is %s%v at %d, want %s[%d]: %w", s.path, name, t.DType, t.Shape, t.Begin, dt, n, ErrCorrupt)
	}
	return t, nil
}

// readChunks reads chunks [first, last] of the data section into buf
// (grown if short) and checks each against its CRC-32C. It returns the
// bytes read, a prefix of buf.
func (s *shardFile) readChunks(first, last int64, buf []byte) ([]byte, error) {
	lo := first * s.chunk
	hi := min((last+1)*s.chunk, s.h.DataLen)
	if int64(cap(buf)) < hi-lo {
		buf = make([]byte, hi-lo)
	}
	buf = buf[:hi-lo]
	if _, err := s.f.ReadAt(buf, s.h.DataOffset+lo); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("checkpoint: %s: %w", s.path, ErrTruncated)
		}
		return nil, fmt.Errorf("checkpoint: reading %s: %w", s.path, err)
	}
	for c := first; c <= last; c++ {
		a := (c - first) * s.chunk
		b := min(a+s.chunk, int64(len(buf)))
		if got := crc32c(buf[a:b]); got != s.sums[c] {
			return nil, fmt.Errorf("checkpoint: %s: chunk %d (data bytes %d to %d) has CRC-32C %08x, recorded %08x: %w",
				s.path, c, lo+a, lo+b, got, s.sums[c], ErrChecksum)
		}
	}
	return buf, nil
}
