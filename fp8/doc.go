// Package fp8 provides the FP8 formats E4M3 and E5M2 and their exact
// conversions to and from float32.
//
// It also converts between float32 and bfloat16. It defines the scaling
// recipes of Transformer Engine and the FP8 tensor view type. The recipes
// are per-tensor current and delayed scaling, 1x128 and 128x128 block
// scaling, and MXFP8 with E8M0 scales.
//
// The pure-Go functions of this package are the specification. The GPU
// kernels of distopt must agree with them bit for bit.
//
// # Formats
//
// Format.Encode rounds a float32 to nearest, ties to even, with subnormals.
// It saturates, as the satfinite rule of the GPU's cvt instruction does. A
// finite overflow and ±Inf give ±Max. NaN gives the format's one NaN code,
// E4M3NaN or E5M2NaN. Format.Decode is exact.
//
// Encode is tested on all 2^32 float32 inputs against a float64 reference.
// The casts, CastScaled and the block casts, give the codes of Encode. They
// look them up in a table of 128 KiB per format. The table is built from
// Encode on first use, and checked against it on all inputs.
//
// # Scales
//
// A cast multiplies by a scale and encodes:
//
//	code = Encode(float32(x * scale))
//
// A reader multiplies the decoded value by scale_inv = 1/scale.
//
// ScaleFromAmax is the one rule by which every recipe but MXFP8 derives its
// scales. The scale is fp8 max / amax / 2^margin, optionally a power of two.
// An amax of 0, Inf or NaN gives scale 1.
//
// Amax orders NaN above Inf above finite values. It compares the bits of |x|
// as uint32. So amaxes are exact and do not depend on order. A packed set of
// them is all-reduced as uint32 MAX.
//
// # Recipes
//
// A Recipe names a Format and a Scaling:
//
//   - TensorCurrent: Amax of the whole tensor, over all ranks' pieces,
//     reduced; then ScaleFromAmax, then CastScaled. Two passes.
//   - TensorDelayed: the scale comes from an AmaxHistory of earlier steps.
//     CastScaled returns this cast's amax, which is reduced and pushed after
//     the cast; see AmaxHistory. One pass.
//   - Block1x128: CastBlocks1D with 128-element runs of the flattened
//     tensor, one float32 scale_inv each.
//   - Block128x128: TileAmax per piece, MAX-reduced where a tile straddles
//     pieces; then ScaleFromAmax per tile, then CastTiles.
//   - MXFP8: CastMX with 32-element runs and E8M0 scales, as in OCP MX v1.0.
//
// ParseRecipe reads a recipe from the name every distopt tool takes:
// current, delayed, block, tile or mx, optionally followed by :E5M2. Case
// does not matter. Transformer Engine's and Megatron-LM's names are
// aliases.
//
// Recipe.NumScales gives the number of scales. That is also the number of
// amaxes a recipe may need to reduce.
//
// The block functions take a piece of a tensor, the part a rank owns. 1-D
// blocks must start at a block boundary of the tensor. Tiles take the
// piece's flat offset, and may start and end anywhere.
//
// # Parallelism
//
// Slices of at least 2^16 elements are split across GOMAXPROCS goroutines.
// No result depends on the split.
package fp8
