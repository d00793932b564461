//go:build cgo && linux

package cudnn

// This is the only file of the package that talks to C. It opens the
// library with dlopen (no cuDNN header is included), keeps the addresses
// dlsym returned in a table, and calls through them. Descriptors and the
// handle cross into Go as uintptr values; attribute values cross as
// pointers to Go memory that cuDNN copies before the call returns.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef int dnn_status;

enum {
	F_GetVersion,
	F_GetErrorString,
	F_GetLastErrorString,
	F_Create,
	F_Destroy,
	F_SetStream,
	F_BackendCreate,
	F_BackendDestroy,
	F_BackendSet,
	F_BackendGet,
	F_BackendFinalize,
	F_BackendExecute,
	F_count
};

static void *dnn_open(const char *path, char **err) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == 0) *err = dlerror();
	return h;
}

static void *dnn_sym(void *lib, const char *name) { return dlsym(lib, name); }

static void **dnn_table(void) { return (void **)calloc(F_count, sizeof(void *)); }
static void dnn_put(void **t, int i, void *p) { t[i] = p; }

static size_t dnn_version(void **t) { return ((size_t(*)(void))t[F_GetVersion])(); }

static const char *dnn_error_string(void **t, dnn_status s) {
	return ((const char *(*)(dnn_status))t[F_GetErrorString])(s);
}

// dnn_last_error copies cudnnGetLastErrorString (cuDNN 9) into buf.
static void dnn_last_error(void **t, char *buf, size_t n) {
	buf[0] = 0;
	if (t[F_GetLastErrorString] != 0) ((void (*)(char *, size_t))t[F_GetLastErrorString])(buf, n);
}

static dnn_status dnn_create(void **t, uintptr_t *h) {
	void *p = 0;
	dnn_status s = ((dnn_status(*)(void **))t[F_Create])(&p);
	*h = (uintptr_t)p;
	return s;
}

static dnn_status dnn_destroy(void **t, uintptr_t h) { return ((dnn_status(*)(void *))t[F_Destroy])((void *)h); }

static dnn_status dnn_set_stream(void **t, uintptr_t h, uintptr_t stream) {
	return ((dnn_status(*)(void *, void *))t[F_SetStream])((void *)h, (void *)stream);
}

static dnn_status dnn_be_create(void **t, int type, uintptr_t *d) {
	void *p = 0;
	dnn_status s = ((dnn_status(*)(int, void **))t[F_BackendCreate])(type, &p);
	*d = (uintptr_t)p;
	return s;
}

static dnn_status dnn_be_destroy(void **t, uintptr_t d) {
	return ((dnn_status(*)(void *))t[F_BackendDestroy])((void *)d);
}

static dnn_status dnn_be_set(void **t, uintptr_t d, int name, int type, int64_t n, void *v) {
	return ((dnn_status(*)(void *, int, int, int64_t, void *))t[F_BackendSet])((void *)d, name, type, n, v);
}

static dnn_status dnn_be_get(void **t, uintptr_t d, int name, int type, int64_t want, int64_t *got, void *v) {
	return ((dnn_status(*)(void *, int, int, int64_t, int64_t *, void *))t[F_BackendGet])(
		(void *)d, name, type, want, got, v);
}

static dnn_status dnn_be_finalize(void **t, uintptr_t d) {
	return ((dnn_status(*)(void *))t[F_BackendFinalize])((void *)d);
}

static dnn_status dnn_be_execute(void **t, uintptr_t h, uintptr_t plan, uintptr_t pack) {
	return ((dnn_status(*)(void *, void *, void *))t[F_BackendExecute])((void *)h, (void *)plan, (void *)pack);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// cTable holds the C table of the library's entry points.
type cTable struct{ t *unsafe.Pointer }

var symbols = [C.F_count]string{
	C.F_GetVersion:         "cudnnGetVersion",
	C.F_GetErrorString:     "cudnnGetErrorString",
	C.F_GetLastErrorString: "cudnnGetLastErrorString",
	C.F_Create:             "cudnnCreate",
	C.F_Destroy:            "cudnnDestroy",
	C.F_SetStream:          "cudnnSetStream",
	C.F_BackendCreate:      "cudnnBackendCreateDescriptor",
	C.F_BackendDestroy:     "cudnnBackendDestroyDescriptor",
	C.F_BackendSet:         "cudnnBackendSetAttribute",
	C.F_BackendGet:         "cudnnBackendGetAttribute",
	C.F_BackendFinalize:    "cudnnBackendFinalize",
	C.F_BackendExecute:     "cudnnBackendExecute",
}

// optional are the entry points a library may lack (cuDNN 8 has no
// cudnnGetLastErrorString; Open refuses cuDNN 8 by its version instead).
var optional = map[int]bool{C.F_GetLastErrorString: true}

// openTable opens the library at path and resolves every entry point. The
// library stays loaded for the life of the process.
func openTable(path string) (api, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cerr *C.char
	lib := C.dnn_open(cpath, &cerr)
	if lib == nil {
		return nil, fmt.Errorf("dlopen %s: %s", path, C.GoString(cerr))
	}
	t := C.dnn_table()
	for i, name := range symbols {
		cname := C.CString(name)
		p := C.dnn_sym(lib, cname)
		C.free(unsafe.Pointer(cname))
		if p == nil && !optional[i] {
			C.free(unsafe.Pointer(t))
			return nil, fmt.Errorf("%s lacks %s", path, name)
		}
		C.dnn_put(t, C.int(i), p)
	}
	return &cTable{t: t}, nil
}

// loadOnly loads the library at path for good, for the loader to find by
// its soname later; failures are left to the later load.
func loadOnly(path string) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var cerr *C.char
	C.dnn_open(cpath, &cerr)
}

func (f *cTable) version() int { return int(C.dnn_version(f.t)) }

func (f *cTable) errorString(s Status) string {
	return C.GoString(C.dnn_error_string(f.t, C.dnn_status(s)))
}

func (f *cTable) lastError() string {
	var buf [1024]C.char
	C.dnn_last_error(f.t, &buf[0], C.size_t(len(buf)))
	return C.GoString(&buf[0])
}

func (f *cTable) create() (uintptr, Status) {
	var h C.uintptr_t
	s := C.dnn_create(f.t, &h)
	return uintptr(h), Status(s)
}

func (f *cTable) destroy(h uintptr) Status { return Status(C.dnn_destroy(f.t, C.uintptr_t(h))) }

func (f *cTable) setStream(h, stream uintptr) Status {
	return Status(C.dnn_set_stream(f.t, C.uintptr_t(h), C.uintptr_t(stream)))
}

func (f *cTable) createDesc(t descType) (uintptr, Status) {
	var d C.uintptr_t
	s := C.dnn_be_create(f.t, C.int(t), &d)
	return uintptr(d), Status(s)
}

func (f *cTable) destroyDesc(d uintptr) Status { return Status(C.dnn_be_destroy(f.t, C.uintptr_t(d))) }

// set passes n elements of type typ at v (Go memory that cuDNN copies).
func (f *cTable) set(d uintptr, name attrName, typ attrType, n int, v unsafe.Pointer) Status {
	return Status(C.dnn_be_set(f.t, C.uintptr_t(d), C.int(name), C.int(typ), C.int64_t(n), v))
}

func (f *cTable) get(d uintptr, name attrName, typ attrType, want int, v unsafe.Pointer) (int, Status) {
	var got C.int64_t
	s := C.dnn_be_get(f.t, C.uintptr_t(d), C.int(name), C.int(typ), C.int64_t(want), &got, v)
	return int(got), Status(s)
}

func (f *cTable) finalize(d uintptr) Status { return Status(C.dnn_be_finalize(f.t, C.uintptr_t(d))) }

func (f *cTable) execute(h, plan, pack uintptr) Status {
	return Status(C.dnn_be_execute(f.t, C.uintptr_t(h), C.uintptr_t(plan), C.uintptr_t(pack)))
}

// hostScalar is a float32 in C memory: the value of a by-value tensor,
// whose address the variant pack holds until execution.
type hostScalar struct{ p unsafe.Pointer }

func newHostScalar(v float32) hostScalar {
	p := C.malloc(4)
	*(*float32)(p) = v
	return hostScalar{p: p}
}

func (h hostScalar) addr() uintptr { return uintptr(h.p) }

func (h hostScalar) free() { C.free(h.p) }
