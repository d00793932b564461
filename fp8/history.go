package fp8

// AmaxHistory is the state of per-tensor delayed scaling: the amaxes of the
// last Len() casts, oldest first, zeros before anything was pushed.
//
// One step of delayed scaling is, in this order:
//
//  1. scale, scaleInv := h.Scale(f, margin, pow2), from the history as it
//     stands BEFORE this step;
//  2. cast the tensor with that scale; CastScaled returns the tensor's amax
//     in the same pass;
//  3. reduce that amax across ranks (MAX), then h.Push(amax).
//
// So the cast of step k uses the amaxes of steps k-Len() .. k-1, and the
// first cast of all uses scale 1 (a history of zeros). Every rank pushes the
// same reduced amax, so every rank derives the same scale. Quantize follows
// this order. An AmaxHistory is not safe for concurrent use.
type AmaxHistory struct {
	amax   []float32 // ring buffer
	next   int       // index the next Push writes
	reduce HistoryReduce
}

// NewAmaxHistory returns a history of n zeros whose Scale reduces it with
// reduce. It panics if n < 1.
func NewAmaxHistory(n int, reduce HistoryReduce) *AmaxHistory {
	if n < 1 {
		panic("fp8: NewAmaxHistory: length must be positive")
	}
	return &AmaxHistory{amax: make([]float32, n), reduce: reduce}
}

// NewHistory returns the AmaxHistory of a TensorDelayed recipe: r.History()
// zeros, reduced with r.HistoryReduce.
func (r Recipe) NewHistory() *AmaxHistory { return NewAmaxHistory(r.History(), r.HistoryReduce) }

// Len returns the history length.
func (h *AmaxHistory) Len() int { return len(h.amax) }

// Push records the amax of a cast, dropping the oldest one.
func (h *AmaxHistory) Push(amax float32) {
	h.amax[h.next] = amax
	h.next = (h.next + 1) % len(h.amax)
}

// Values returns a copy of the history, oldest first.
func (h *AmaxHistory) Values() []float32 {
	return append(append([]float32(nil), h.amax[h.next:]...), h.amax[:h.next]...)
}

// Reduced returns the amax the next scale derives from: with HistoryMax the
// maximum of the history in the order of MaxAmax (so a NaN or Inf anywhere
// in the history wins, and ScaleFromAmax then gives scale 1); with
// HistoryMostRecent the last pushed amax (0 before any Push).
func (h *AmaxHistory) Reduced(r HistoryReduce) float32 {
	if r == HistoryMostRecent {
		return h.amax[(h.next+len(h.amax)-1)%len(h.amax)]
	}
	var m float32
	for _, a := range h.amax {
		m = MaxAmax(m, a)
	}
	return m
}

// Scale returns ScaleFromAmax(h.Reduced(reduce), f, margin, pow2), reduce
// being the reduction h was made with: the scale of the next cast.
func (h *AmaxHistory) Scale(f Format, margin int, pow2 bool) (scale, scaleInv float32) {
	return ScaleFromAmax(h.Reduced(h.reduce), f, margin, pow2)
}
