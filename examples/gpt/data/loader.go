package data

import "fmt"

// Loader hands out training sequences: every optimizer step takes
// World x MicroBatches x Batch sequences of Seq+1 tokens (inputs and the
// targets shifted by one) from random offsets of Tokens.
type Loader struct {
	Tokens []uint16
	// Seq is the context length, Batch the sequences of one micro-batch
	// of one rank.
	Seq, Batch int
	// World ranks, each doing MicroBatches micro-batches per step.
	World, MicroBatches int
	Seed                uint64
}

// Validate reports a loader that cannot serve batches.
func (l Loader) Validate() error {
	switch {
	case l.Seq < 1 || l.Batch < 1 || l.World < 1 || l.MicroBatches < 1:
		return fmt.Errorf("data: loader %d x %d x %d x %d: sizes must be at least 1", l.World, l.MicroBatches, l.Batch, l.Seq)
	case len(l.Tokens) < l.Seq+2:
		return fmt.Errorf("data: %d tokens are too few for sequences of %d", len(l.Tokens), l.Seq)
	}
	return nil
}

// Global is the number of sequences of one step, over all ranks.
func (l Loader) Global() int { return l.World * l.MicroBatches * l.Batch }

// Index is the global index of sequence b of micro-batch m of rank r at
// step: step*Global + (r*MicroBatches + m)*Batch + b. Each rank takes a
// contiguous block of the step's sequences, so that the step's data does
// not depend on World for the same Global.
func (l Loader) Index(step, rank, micro, b int) uint64 {
	return uint64(step)*uint64(l.Global()) + uint64((rank*l.MicroBatches+micro)*l.Batch+b)
}

// Offset is where the sequence of global index g starts:
// SplitMix64(Seed + g*0x9E3779B97F4A7C15) mod (len(Tokens) - Seq), with
// arithmetic modulo 2^64.
func (l Loader) Offset(g uint64) int {
	return int(SplitMix64(l.Seed+g*0x9E3779B97F4A7C15) % uint64(len(l.Tokens)-l.Seq))
}

// MicroBatch fills inputs and targets (Batch*Seq tokens each, row-major
// [Batch, Seq]) with micro-batch micro of rank at step.
func (l Loader) MicroBatch(inputs, targets []int32, step, rank, micro int) {
	for b := range l.Batch {
		off := l.Offset(l.Index(step, rank, micro, b))
		for t := range l.Seq {
			inputs[b*l.Seq+t] = int32(l.Tokens[off+t])
			targets[b*l.Seq+t] = int32(l.Tokens[off+t+1])
		}
	}
}

// SplitMix64 is the output function of the SplitMix64 generator (Steele,
// Lea and Flood, 2014): a bijection of 64-bit integers whose outputs look
// independent for consecutive inputs.
func SplitMix64(x uint64) uint64 {
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// ValidWindows returns the number of validation sequences of Seq+1
// tokens that valid holds without overlap: window k covers
// valid[k*Seq : k*Seq+Seq+1].
func ValidWindows(valid []uint16, seq int) int {
	if len(valid) <= seq {
		return 0
	}
	return (len(valid) - 1) / seq
}

// Window fills inputs and targets (seq tokens each) with validation
// window k.
func Window(inputs, targets []int32, valid []uint16, seq, k int) {
	for t := range seq {
		inputs[t] = int32(valid[k*seq+t])
		targets[t] = int32(valid[k*seq+t+1])
	}
}

// EvalWindows returns the validation windows (Window's k) that an
// evaluation of count sequences reads when the split holds total windows
// (ValidWindows): with spread, window ⌊j·total/count⌋ for j < count,
// evenly strided over the whole split from window 0 (consecutive windows
// hold neighbouring lines of one file, so the first few windows sample a
// few files); without, the first count windows. scripts/gpt/torch_gpt.py
// reads the same windows (eval_windows). It returns an error when count is
// not in [1, total].
func EvalWindows(count, total int, spread bool) ([]int, error) {
	if count < 1 || count > total {
		return nil, fmt.Errorf("data: %d evaluation windows out of %d: want between 1 and %d", count, total, total)
	}
	ks := make([]int, count)
	for j := range ks {
		ks[j] = j
		if spread {
			ks[j] = int(int64(j) * int64(total) / int64(count))
		}
	}
	return ks, nil
}
