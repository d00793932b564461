//go:build !cgo || !linux

package nccl

// Without cgo (or off Linux) no library can be opened: openTable fails, so
// Open and Default fail with ErrNoLibrary and no other function here is ever
// reached. They exist so that the package builds.

import "fmt"

type fnTable struct{}

func openTable(path string) (*fnTable, error) {
	return nil, fmt.Errorf("%w: %s cannot be opened in a build without cgo", ErrNoLibrary, path)
}

const errStub = InternalError

func (l *Library) getVersion() (int, error)     { return 0, &Error{Op: "ncclGetVersion", Code: errStub} }
func (l *Library) errorString(Result) string    { return "" }
func (l *Library) lastError(*Comm) string       { return "" }
func (l *Library) getUniqueID(*UniqueID) Result { return errStub }
func (l *Library) commInitRankConfig(int, *UniqueID, int, Config) (uintptr, Result) {
	return 0, errStub
}
func (l *Library) commGetAsyncError(uintptr) (Result, Result)     { return errStub, errStub }
func (l *Library) commQuery(commQueryKind, uintptr) (int, Result) { return 0, errStub }
func (l *Library) commFinalize(uintptr) Result                    { return errStub }
func (l *Library) commDestroy(uintptr) Result                     { return errStub }
func (l *Library) commAbort(uintptr) Result                       { return errStub }
func (l *Library) groupStart() Result                             { return errStub }
func (l *Library) groupEnd() Result                               { return errStub }
func (l *Library) collective(collKind, uintptr, uintptr, int, DataType, RedOp, int, uintptr, uintptr) Result {
	return errStub
}
