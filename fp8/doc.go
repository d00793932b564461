// Package fp8 provides the FP8 formats E4M3 and E5M2, exact conversions
// between them and float32 (and between float32 and bfloat16), the scaling
// recipes of Transformer Engine (per-tensor current and delayed scaling,
// 1x128 and 128x128 block scaling, MXFP8 with E8M0 scales), and the FP8
// tensor view type.
//
// The pure-Go functions of this package are the specification: the GPU
// kernels of distopt must agree with them bit for bit.
//
// # Formats
//
// Format.Encode rounds a float32 to nearest, ties to even, with subnormals,
// and saturates (the satfinite rule of the GPU's cvt instruction): a finite
// overflow and ±Inf give ±Max; NaN gives the NaN code of the format
// (E4M3NaN, E5M2NaN: one constant each). Format.Decode is exact. Encode is
// tested on all 2^32 float32 inputs against a float64 reference. The casts
// (CastScaled and the block casts) give the codes of Encode by looking them
// up in a table of 128 KiB per format, built from Encode on first use and
// checked against it on all inputs.
//
// # Scales
//
// A cast multiplies by a scale and encodes: code = Encode(float32(x *
// scale)); a reader multiplies the decoded value by scale_inv = 1/scale.
// ScaleFromAmax is the one rule every recipe but MXFP8 derives scales with
// (fp8 max / amax / 2^margin, optional power of two, scale 1 for an amax of
// 0, Inf or NaN). Amax orders NaN above Inf above finite values by comparing
// the bits of |x| as uint32, so amaxes are exact, order-independent, and a
// packed set of them is all-reduced as uint32 MAX.
//
// # Recipes
//
// A Recipe names a Format and a Scaling:
//
//   - TensorCurrent: Amax of the whole tensor (all ranks' pieces, reduced),
//     then ScaleFromAmax, then CastScaled: two passes.
//   - TensorDelayed: the scale comes from an AmaxHistory of earlier steps;
//     CastScaled returns this cast's amax, which is reduced and pushed after
//     the cast (see AmaxHistory): one pass.
//   - Block1x128: CastBlocks1D with 128-element runs of the flattened
//     tensor, one float32 scale_inv each.
//   - Block128x128: TileAmax per piece, MAX-reduced where a tile straddles
//     pieces, ScaleFromAmax per tile, then CastTiles.
//   - MXFP8: CastMX with 32-element runs and E8M0 scales (OCP MX v1.0).
//
// ParseRecipe reads a recipe from the name every distopt tool takes
// (current, delayed, block, tile, mx, optionally :E5M2), case-insensitively,
// with Transformer Engine's and Megatron-LM's names as aliases.
//
// Recipe.NumScales gives the number of scales, which is also the number of
// amaxes a recipe may need to reduce. The block functions take a piece of a
// tensor (what a rank owns): 1-D blocks must start at a block boundary of
// the tensor; tiles take the piece's flat offset and may start and end
// anywhere.
//
// # Parallelism
//
// Slices of at least 2^16 elements are split across GOMAXPROCS goroutines;
// every result is independent of the split.
package fp8
