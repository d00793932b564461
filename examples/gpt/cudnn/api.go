package cudnn

import "unsafe"

// api is the library as the package calls it: the few functions of
// cuDNN's handle and backend (graph) API, on C values. cTable (cgo) is the
// real one; the tests substitute a recorder.
type api interface {
	version() int
	errorString(s Status) string
	// lastError is cudnnGetLastErrorString: cuDNN's own account of the
	// last failure on this thread ("" when it has none).
	lastError() string
	create() (uintptr, Status)
	destroy(h uintptr) Status
	setStream(h, stream uintptr) Status
	createDesc(t descType) (uintptr, Status)
	destroyDesc(d uintptr) Status
	set(d uintptr, name attrName, typ attrType, n int, v unsafe.Pointer) Status
	get(d uintptr, name attrName, typ attrType, want int, v unsafe.Pointer) (int, Status)
	finalize(d uintptr) Status
	execute(h, plan, pack uintptr) Status
}
