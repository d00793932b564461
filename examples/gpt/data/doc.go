// Package data prepares and serves the training text of examples/gpt: the
// Go distribution's own source tree (GOROOT/src, code and English
// comments), which every machine with Go carries, so that no download is
// needed.
//
// # Tokenizer
//
// Byte-level: a token is one byte (vocabulary 256). It needs no training,
// its round trip is exact for every file (invalid UTF-8 included), and a
// PyTorch reference reads the same token files without a tokenizer of its
// own. The vocabulary being small, the tied embedding and output head are
// tiny (256 x hidden) and nearly every parameter of the 124M shape is a
// transformer matrix read by the FP8 GEMMs, which is what the loss
// comparison is meant to exercise. The cost is a shorter text per context
// (1024 bytes, not 1024 words); the loss is then in nats per byte. Token
// files store uint16 so that a learnt vocabulary (byte-pair encoding) can
// replace it without a format change.
//
// # Split
//
// Files are chosen by extension (Extensions) and size, sorted by path, and
// assigned to the validation split when the FNV-1a hash of their path
// (relative to the root, with slashes) modulo 1000 is below
// ValidPermille: the split depends on a file's path only, not on which
// other files exist. Each split is the concatenation of its files in path
// order, every file followed by the separator byte 0 (NUL), which no chosen
// file contains.
//
// # Batches
//
// A Loader maps (step, rank) to the sequences of that rank: see
// Loader.Offset for the formula a reference implementation reproduces.
package data
