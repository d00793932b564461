// Package shard provides the flat layout of a data-parallel optimizer's
// buffers: which bucket each parameter lives in, where, how much padding each
// bucket carries, which contiguous range of every bucket each rank owns, and
// the pieces of parameters that fall in that range.
//
// A Layout is a pure function of the parameter list, the data-parallel size
// and the options: every rank computes the same layout on its own, and the
// Fingerprint lets ranks check that they did.
//
// # Rules
//
// Parameters keep their order. FP8 parameters and high-precision parameters
// go to different buckets (their gathered element types differ). A bucket is
// filled until the next parameter would take it past Options.BucketElements;
// a parameter never spans two buckets, so a parameter larger than the target
// has a bucket of its own. Each parameter starts at a multiple of the
// bucket's alignment (Options.Align for FP8 buckets, HighPrecisionAlign for
// the others); the gaps are padding. A bucket's size is rounded up to a
// multiple of world x alignment, and rank r owns elements
// [r*size/world, (r+1)*size/world). Shard boundaries are therefore multiples
// of the alignment, so a 1-D block of the FP8 recipe (32 or 128 elements,
// dividing Align) never straddles two ranks. Shards may hold only padding
// (when world is larger than the bucket) and parameters may straddle shard
// boundaries.
package shard
