// Package cpu provides the reference backend of the optimizer: host
// memory, pure Go, split over goroutines for large shards.
//
// Its results are the specification that every other backend must match
// byte for byte (optimizer/backendtest checks them). They do not depend on
// the number of goroutines. The arithmetic itself is defined in
// optimizer/backend; this package runs it over buffers, one loop per
// storage type of moments and gradients.
//
// Allocations larger than the host's RAM and swap are refused with
// ErrOutOfMemory, since Go would end the process instead.
package cpu
