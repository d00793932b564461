// Package cpu provides the reference backend of the optimizer.
//
// It works in host memory, in pure Go. It splits large shards over
// goroutines.
//
// Its results are the specification. Every other backend must match them
// byte for byte, and optimizer/backendtest checks that. The results do not
// depend on the number of goroutines. The arithmetic itself is defined in
// optimizer/backend. This package runs it over buffers, with one loop per
// storage type of moments and gradients.
//
// An allocation larger than the host's RAM and swap fails with
// ErrOutOfMemory. Go would otherwise end the process.
package cpu
