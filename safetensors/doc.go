// Package safetensors implements the safetensors file format: the header
// codec and its validation.
//
// It does no tensor arithmetic and holds no data. Callers read and write the
// data section themselves, at the offsets the header gives. So a file is
// never read whole.
//
// distopt's checkpoints and exports are safetensors files: see
// optimizer/checkpoint and `distopt export`. A program reads their tensors
// with Read and Header.Lookup.
//
// # Format
//
// A file is, in order:
//
//   - 8 bytes: N, the length of the header, a little-endian uint64;
//   - N bytes: the header, a UTF-8 JSON object that starts with '{' and may
//     be padded at its end with spaces (0x20);
//   - the data section: the tensors' bytes, little-endian, row-major.
//
// Every key of the header except "__metadata__" names a tensor. It maps to
// an object of this form:
//
//	{"dtype": D, "shape": [d0, d1, ...], "data_offsets": [begin, end]}
//
// Begin and end are byte offsets from the start of the data section. The
// optional "__metadata__" maps strings to strings.
//
// The tensors' byte ranges must tile the data section exactly. Sorted by
// offset, they are contiguous, start at 0 and do not overlap. The last one
// ends where the file ends.
//
// This package writes headers in the order the caller gives the tensors,
// with "__metadata__" first. It pads them with spaces so that the data
// section starts at a multiple of 8 bytes, as the reference implementation
// does.
package safetensors
