package fp8grad

import "fmt"

// Memory is what the FP8 mode holds on one rank.
type Memory struct {
	// Staging is the send and receive wire buffers of the reduce-scatters
	// in flight: 2 x d x PieceBytes(n, Block) bytes for a bucket of d x n
	// elements, about 2.06 bytes per bucket element with blocks of 128. A
	// host Comm (New) allocates them per reduce-scatter and drops them when
	// its Wait returns; a device Comm (NewDevice) returns them to a pool
	// of free buffers, one list per size, and frees them at Close, so that
	// it holds, for each size, as many as were ever in flight at once.
	Staging int64
	// Residual is the error feedback residual, 4 bytes per element of
	// every bucket (the whole bucket, not the rank's shard), kept for the
	// life of the Comm (0 without error feedback).
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
	if cfg.ErrorFeedback && elems > 0 {
		m.Residual = 4 * int64(elems)
	}
	return m, nil
}

// Steps describes the gradient reduce-scatters of one step on one rank,
// each bucket's with its own Tag (as the optimizer issues them).
type Steps struct {
	// Buckets are the elements of every bucket (each a multiple of
	// Ranks), in the order their reduce-scatters start.
	Buckets []int
	// Ranks is the number of ranks d.
	Ranks int
	// InFlight is the most reduce-scatters in flight at once, a started
	// one being waited for before the next starts beyond it (the
	// optimizer's sharded gradients: Config.GradBuffers). 0 or at least
	// len(Buckets): all of them at once (one group, or a full gradient
	// buffer per bucket).
	InFlight int
	// Rounds is the number of times the sequence of Buckets runs in a step
	// (the micro-batches of sharded gradients); 0 means 1.
	Rounds int
}

// PredictSteps returns what a device Comm (NewDevice) holds on one rank
// after any number of steps of s under cfg: the staging pool (for each
// size of wire buffer, the most reduce-scatters of that size in flight at
// once, over every run of InFlight consecutive starts) and the residual of
// every bucket. A host Comm holds the same residuals; its staging, dropped
// after each Wait, peaks at no more.
func PredictSteps(s Steps, cfg Config) (Memory, error) {
	var m Memory
	if s.Ranks < 1 || s.InFlight < 0 || s.Rounds < 0 {
		return m, fmt.Errorf("fp8grad: %d ranks, %d in flight, %d rounds: %w", s.Ranks, s.InFlight, s.Rounds, ErrConfig)
	}
	seq := make([]int64, 0, len(s.Buckets)*max(1, s.Rounds))
	for range max(1, s.Rounds) {
		for _, elems := range s.Buckets {
			b, err := PredictMemory(elems, s.Ranks, cfg)
			if err != nil {
				return Memory{}, err
			}
			seq = append(seq, b.Staging)
		}
	}
	for _, elems := range s.Buckets {
		b, _ := PredictMemory(elems, s.Ranks, cfg)
		m.Residual += b.Residual
	}
	k := s.InFlight
	if k == 0 || k > len(seq) {
		k = len(seq)
	}
	most := map[int64]int{} // staging bytes of a reduce-scatter: most in flight at once
	for lo := 0; lo+k <= len(seq); lo++ {
		count := map[int64]int{}
		for _, b := range seq[lo : lo+k] {
			count[b]++
			most[b] = max(most[b], count[b])
		}
	}
	for b, n := range most {
		m.Staging += b * int64(n)
	}
	return m, nil
}
