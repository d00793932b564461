// Package data prepares and serves the training text of examples/gpt.
//
// The text is the Go distribution's own source tree, GOROOT/src: code and
// English comments. Every machine with Go carries it, so no download is
// needed.
//
// # Tokenizer
//
// The tokenizer is byte-level: a token is one byte, and the vocabulary is
// 256. It needs no training. Its round trip is exact for every file,
// invalid UTF-8 included. A PyTorch reference reads the same token files
// without a tokenizer of its own.
//
// With so small a vocabulary, the tied embedding and output head are tiny:
// 256 × hidden. So nearly every parameter of the 124M shape is a
// transformer matrix read by the FP8 GEMMs. That is what the loss
// comparison is meant to exercise. The cost is a shorter text per context:
// 1024 bytes, not 1024 words. The loss is then in nats per byte.
//
// Token files store uint16. So a learnt vocabulary, such as byte-pair
// encoding, can replace the bytes without a format change.
//
// # Split
//
// Files are chosen by extension (Extensions) and size, and sorted by path.
// A file goes to the validation split when the FNV-1a hash of its path,
// modulo 1000, is below ValidPermille. The path is relative to the root,
// with slashes. So the split depends on a file's path only, not on which
// other files exist.
//
// Each split is the concatenation of its files in path order. Every file is
// followed by the separator byte 0 (NUL), which no chosen file contains.
//
// # Batches
//
// A Loader maps a step, a rank and a micro-batch to that rank's sequences.
// Loader.Index and Loader.Offset give the formulas that a reference
// implementation reproduces.
package data
