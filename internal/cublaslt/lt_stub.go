//go:build !cgo || !linux

package cublaslt

// Without cgo (or off Linux) no library can be opened: openTable fails, so
// Open and Default fail with ErrNoLibrary and no other method here is ever
// reached. They exist so that the package builds.

import "errors"

type fnTable struct{}

func openTable(path string) (*fnTable, error) {
	return nil, errors.New("a build without cgo cannot open " + path)
}

const errStub = StatusNotInitialized

func (f *fnTable) version() int                                       { return 0 }
func (f *fnTable) create() (uintptr, Status)                          { return 0, errStub }
func (f *fnTable) destroy(uintptr) Status                             { return errStub }
func (f *fnTable) descCreate(ComputeType, DataType) (uintptr, Status) { return 0, errStub }
func (f *fnTable) descDestroy(uintptr) Status                         { return errStub }
func (f *fnTable) descSetI32(uintptr, descAttr, int32) Status         { return errStub }
func (f *fnTable) descSetI8(uintptr, descAttr, int8) Status           { return errStub }
func (f *fnTable) descSetPtr(uintptr, descAttr, uint64) Status        { return errStub }
func (f *fnTable) layoutCreate(DataType, uint64, uint64, int64) (uintptr, Status) {
	return 0, errStub
}
func (f *fnTable) layoutBatch(uintptr, int32, int64) Status       { return errStub }
func (f *fnTable) layoutDestroy(uintptr) Status                   { return errStub }
func (f *fnTable) prefCreate(uint64, [4]uint32) (uintptr, Status) { return 0, errStub }
func (f *fnTable) prefDestroy(uintptr) Status                     { return errStub }
func (f *fnTable) heuristic(h, desc, a, b, c, d, pref uintptr, want int) ([]Algo, Status) {
	return nil, errStub
}
func (f *fnTable) matmul(h, desc uintptr, alpha float32, a, ad, b, bd uintptr, beta float32, c, cd, d, dd uintptr, algo *Algo, ws uintptr, wsSize int, stream uintptr) Status {
	return errStub
}
