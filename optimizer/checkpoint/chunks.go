package checkpoint

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
)

// DefaultChunkBytes is the default size of the checksummed chunks of a
// shard file's data section.
const DefaultChunkBytes = 1 << 20

// MaxChunkBytes bounds SaveOptions.ChunkBytes and the chunk size a reader
// accepts from a shard file: a loader reads whole chunks, so a chunk is
// also the most it reads at once beyond what it needs.
const MaxChunkBytes = 1 << 30

// Metadata keys of a shard file's header.
const (
	metaFormat     = "distopt.format"
	metaVersion    = "distopt.version"
	metaRank       = "distopt.rank"
	metaWorld      = "distopt.world"
	metaStep       = "distopt.step"
	metaChunkBytes = "distopt.chunk_bytes"
	metaChunkCRC   = "distopt.chunk_crc32c"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunkSums is an io.Writer that computes the CRC-32C of every chunk of
// size bytes of what is written to it (the last chunk may be shorter).
type chunkSums struct {
	size int
	fill int    // bytes of the current chunk written so far
	crc  uint32 // of the current chunk
	sums []uint32
}

func (c *chunkSums) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), c.size-c.fill)
		c.crc = crc32.Update(c.crc, castagnoli, p[:k])
		c.fill += k
		p = p[k:]
		if c.fill == c.size {
			c.sums = append(c.sums, c.crc)
			c.crc, c.fill = 0, 0
		}
	}
	return n, nil
}

// finish returns the sums, the partial last chunk included.
func (c *chunkSums) finish() []uint32 {
	if c.fill > 0 {
		c.sums = append(c.sums, c.crc)
		c.crc, c.fill = 0, 0
	}
	return c.sums
}

// encodeSums writes sums as hexadecimal, 8 digits each, big-endian.
func encodeSums(sums []uint32) string {
	b := make([]byte, 4*len(sums))
	for i, s := range sums {
		binary.BigEndian.PutUint32(b[4*i:], s)
	}
	return hex.EncodeToString(b)
}

// decodeSums parses the output of encodeSums; it wants exactly n sums.
func decodeSums(s string, n int) ([]uint32, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4*n {
		return nil, fmt.Errorf("chunk checksums of %d characters, want %d hexadecimal digits: %w", len(s), 8*n, ErrCorrupt)
	}
	sums := make([]uint32, n)
	for i := range sums {
		sums[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return sums, nil
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
