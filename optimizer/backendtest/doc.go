// Package backendtest is the conformance suite of backend.Backend: Run
// gives a backend random GradStats, Update and Cast calls (and UpdateShards
// and CastShards calls over several shards when it is an
// backend.ShardUpdater, and their plans over several steps when it is an
// backend.UpdatePlanner) (every rule,
// scaling mode, FP8 format, moment, gradient and high-precision type; odd
// sizes; segments at random offsets with partial chunks and blocks; shards
// at element offsets off the kernels' vector width in their buffers; tile
// segments starting mid-matrix; NaN, Inf, huge and subnormal values; blocks
// whose amax is 0) and compares every byte of every buffer with what the
// CPU reference backend (cpu.New) writes for the same call,
// including the bytes outside every segment, which must stay untouched.
//
// One difference is allowed: float32 values (masters, moments, amax keys)
// that are NaN on both sides may differ in their payload, which the
// backends do not specify (see optimizer/gpu).
package backendtest
