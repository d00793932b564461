// Package shard computes the flat layout of a data-parallel optimizer's
// buffers.
//
// A Layout says which bucket each parameter lives in, and where. It gives
// the padding of each bucket, and the contiguous range of every bucket that
// each rank owns. It also lists the pieces of parameters that fall in that
// range.
//
// A Layout is a pure function of the parameter list, the data-parallel size
// and the options. So every rank computes the same layout on its own. The
// Fingerprint lets ranks check that they did.
//
// # Rules
//
// Parameters keep their order. FP8 and high-precision parameters go to
// different buckets, since their gathered element types differ. A bucket is
// filled until the next parameter would take it past
// Options.BucketElements. A parameter never spans two buckets. So a
// parameter larger than the target has a bucket of its own.
//
// Each parameter starts at a multiple of the bucket's alignment. That is
// Options.Align for FP8 buckets and HighPrecisionAlign for the others. The
// gaps are padding. A bucket's size is rounded up to a multiple of world ×
// alignment. Rank r owns elements [r*size/world, (r+1)*size/world).
//
// Shard boundaries are therefore multiples of the alignment. A 1-D block of
// the FP8 recipe has 32 or 128 elements, which divide Align. So it never
// straddles two ranks. A shard may hold only padding, when world is larger
// than the bucket. A parameter may straddle shard boundaries.
package shard
