package main

import "fmt"

// memSummary is one rank's device memory as NVML measured it, split by
// when it appeared (bytes).
type memSummary struct {
	Measure string `json:"measure"` // "process" or "device": see gpuMemory
	// Context: after the CUDA backend was made (primary context, the
	// kernels' modules, the stream).
	Context int64 `json:"context_bytes"`
	// NCCL: added by the communicator and a warm-up of each collective.
	NCCL int64 `json:"nccl_bytes"`
	// Optimizer: added by optimizer.New (its buffers, rounded by the driver).
	Optimizer int64 `json:"optimizer_bytes"`
	// Steps: added during the steps (buffers NCCL makes for large
	// collectives, the backend's segment tables).
	Steps int64 `json:"steps_bytes"`
	Peak  int64 `json:"peak_bytes"`  // largest sample (after each step)
	Final int64 `json:"final_bytes"` // after the last step
	// Allocated is what the library asked the driver for through
	// internal/cuda (the optimizer's buffers, segment tables, NCCL
	// scratch), still held after the last step.
	Allocated int64 `json:"allocated_bytes"`
}

// memRecord follows one rank's NVML samples through the run.
type memRecord struct {
	on                                      bool
	measure                                 string
	afterContext, afterComm, afterOptimizer int64
	peak, last                              int64
}

func newMemRecord(j *job) *memRecord {
	m := &memRecord{on: j.mem != nil, afterContext: j.afterContext, afterComm: j.afterComm}
	if m.on {
		_, m.measure, _ = j.mem.used()
	}
	return m
}

// step takes the sample after a step and returns it.
func (m *memRecord) step(j *job) int64 {
	u := j.sample()
	m.peak, m.last = max(m.peak, u), u
	return u
}

// line is the memory part of a progress line ("" without NVML).
func (m *memRecord) line(used, predicted int64) string {
	if !m.on {
		return ""
	}
	other := used - predicted - m.afterComm
	return fmt.Sprintf(" | nvml %.2f GiB = predicted %.2f + context %.2f + nccl %.2f + other %.2f",
		gib(used), gib(predicted), gib(m.afterContext), gib(m.afterComm-m.afterContext), gib(other))
}

// summary returns the rank's memory summary (nil without NVML).
func (m *memRecord) summary(j *job) *memSummary {
	if !m.on {
		return nil
	}
	s := &memSummary{
		Measure:   m.measure,
		Context:   m.afterContext,
		NCCL:      m.afterComm - m.afterContext,
		Optimizer: m.afterOptimizer - m.afterComm,
		Steps:     m.last - m.afterOptimizer,
		Peak:      m.peak,
		Final:     m.last,
	}
	if j.dev != nil {
		s.Allocated = int64(j.dev.Usage().DeviceBytes)
	}
	return s
}

// gib converts bytes to GiB.
func gib[T int64 | float64](b T) float64 { return float64(b) / (1 << 30) }
