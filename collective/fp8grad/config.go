package fp8grad

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/fp8"
)

// ErrConfig marks a Config or communicator that cannot form a Comm.
var ErrConfig = errors.New("invalid configuration")

// DefaultBlock is the block size of a zero Config.Block.
const DefaultBlock = 128

// Config selects the gradient encoding.
type Config struct {
	// Format is the FP8 format of the codes: fp8.E4M3 (default, more
	// precision) or fp8.E5M2 (more range within a block).
	Format fp8.Format
	// Block is the number of consecutive elements that share one scale
	// (default DefaultBlock). Wire bytes per element: 1 + 4/Block.
	Block int
	// ErrorFeedback carries each rank's quantization residual into its
	// next reduce-scatter of the same reduction: the same op Tag, or
	// without a tag the same source buffer (see the package
	// documentation). It costs 4 bytes per element of every source, that
	// is 4 bytes per parameter on every rank.
	ErrorFeedback bool
}

// withDefaults returns c with zero fields set to their defaults, or an
// error naming the first bad field.
func (c Config) withDefaults() (Config, error) {
	if c.Format == 0 {
		c.Format = fp8.E4M3
	}
	if c.Block == 0 {
		c.Block = DefaultBlock
	}
	if !c.Format.Valid() {
		return c, fmt.Errorf("fp8grad: format %v is not E4M3 or E5M2: %w", c.Format, ErrConfig)
	}
	if c.Block < 1 {
		return c, fmt.Errorf("fp8grad: block %d is not positive: %w", c.Block, ErrConfig)
	}
	return c, nil
}

// WireBytesPerElement is the number of bytes the reduce-scatter moves per
// gradient element and destination rank with blocks of block elements,
// ignoring the padding of a piece to 4 bytes: 1 + 4/block (1.03125 for
// 128), against 2 for bfloat16 gradients.
func WireBytesPerElement(block int) float64 { return 1 + float64(ScaleBytes)/float64(block) }
