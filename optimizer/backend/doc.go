// Package backend is the contract between the optimizer and its backends,
// for those who write a backend (the CPU reference, cpu.New; the
// CUDA backend, optimizer/gpu). Users of the optimizer need none of it.
//
// An Backend queues two kinds of work per bucket shard: Update
// (UpdateArgs: the update rule over a segment table, fused with what each
// segment's Mode does with the new master) and Cast (CastArgs). A segment
// table is valid when CheckSegments says so. The arithmetic every backend
// must reproduce bit for bit is specified here: AdamWElem and SGDElem per
// element, AddSquare, Normalize and SumOfSquares for the exact gradient
// statistics, AbsBits for amax keys, and EncodeMomentBlock, DecodeMoment
// and EncodeDither for moments stored in FP8 (moments.go). Each update rule is
// defined once, in
// rule.go: its name, moments, per-step scalars (Hyper) and per-parameter
// factors (Factors: StepSize, Shrink, WeightDecay).
//
// optimizer/backendtest checks a backend against the CPU reference, byte
// for byte; CONTRIBUTING.md at the repository root lists the files to
// change to add a rule or a recipe.
package backend
