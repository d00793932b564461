package gemm

// Stage is a class of the work an Engine queues on its stream, for a
// caller's profile of the device time (SetTrace).
type Stage int

const (
	// StageQuantize: casts of activations and output gradients to FP8,
	// with their amax passes and scales.
	StageQuantize Stage = iota + 1
	// StageTranspose: FP8 transposes, and the scale copies and regrids
	// that present an operand to cuBLASLt.
	StageTranspose
	// StageGEMM: the products (cuBLASLt's FP8 matmuls, or the
	// dequantizing fallback).
	StageGEMM
)

var stageNames = [...]string{StageQuantize: "quantize", StageTranspose: "transpose", StageGEMM: "gemm"}

// String returns "quantize", "transpose" or "gemm".
func (s Stage) String() string {
	if s > 0 && int(s) < len(stageNames) {
		return stageNames[s]
	}
	return "Stage(?)"
}

// SetTrace has the engine call trace, on the device's worker, just before
// it queues work of a stage on its stream, so that the caller can record
// an event there: the work queued from then until the caller's next
// event is that stage's. A caller-supplied step inside an engine call
// (ForwardQuantized's fill, BackwardCast's cast) is the caller's to mark.
// nil stops it. Set it while no other goroutine uses the engine.
func (e *Engine) SetTrace(trace func(Stage)) { e.trace = trace }

// mark calls the trace hook, if any, for stage s.
func (e *Engine) mark(s Stage) {
	if e.trace != nil {
		e.trace(s)
	}
}
