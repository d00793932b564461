package fp8grad

import "fmt"

// Memory is what the FP8 mode holds on one rank for one gradient bucket.
type Memory struct {
	// Staging is the send and receive wire buffers of a reduce-scatter in
	// flight, 2 x d x PieceBytes(n, Block): about 2.06 bytes per bucket
	// element with blocks of 128, freed when its Wait returns.
	Staging int64
	// Residual is the error feedback residual, 4 bytes per bucket element,
	// kept for the life of the Comm (0 without error feedback).
	Residual int64
}

// PredictMemory returns the memory of the reduce-scatter of a bucket of
// elems elements on d ranks under cfg (defaults filled in). elems must be
// a multiple of d.
func PredictMemory(elems, d int, cfg Config) (Memory, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Memory{}, err
	}
	if d < 1 || elems < 0 || elems%d != 0 {
		return Memory{}, fmt.Errorf("fp8grad: a bucket of %d elements on %d ranks: %w", elems, d, ErrConfig)
	}
	m := Memory{Staging: 2 * int64(d) * int64(PieceBytes(elems/d, cfg.Block))}
	if cfg.ErrorFeedback {
		m.Residual = 4 * int64(elems)
	}
	return m, nil
}
