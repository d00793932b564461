// Package backendtest is the conformance suite of backend.Backend.
//
// Run makes random GradStats, Update and Cast calls on a backend. On a
// backend.ShardUpdater it also calls UpdateShards and CastShards over
// several shards, and on a backend.UpdatePlanner it plans them once and
// runs the plans over several steps. After each call it compares every
// byte of every buffer with what the CPU reference backend (cpu.New)
// writes. That includes the bytes outside every segment, which must stay
// untouched.
//
// The calls cover:
//
//   - every rule, scaling mode, FP8 format, moment, gradient and
//     high-precision type;
//   - odd sizes, and segments at random offsets with partial chunks and
//     blocks;
//   - shards at element offsets off the kernels' vector width in their
//     buffers;
//   - tile segments that start mid-matrix;
//   - NaN, Inf, huge and subnormal values, and blocks whose amax is 0.
//
// One difference is allowed. Float32 values that are NaN on both sides may
// differ in their payload: masters, moments and amax keys. The backends do
// not specify NaN payloads; see optimizer/gpu.
package backendtest
