//go:build cgo && linux

package cuda

// This file is the only one of the package that talks to C. It declares the
// few driver types and prototypes it needs (no CUDA header is included), keeps
// the addresses that dlsym returned in a table, and calls through them.
// Opaque driver handles cross into Go as uintptr values; device addresses as
// uint64.

/*
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
	F_cuInit,
	F_cuDriverGetVersion,
	F_cuGetErrorName,
	F_cuDeviceGetCount,
	F_cuDeviceGet,
	F_cuDeviceGetName,
	F_cuDeviceGetAttribute,
	F_cuDeviceTotalMem,
	F_cuDeviceGetPCIBusId,
	F_cuDevicePrimaryCtxRetain,
	F_cuDevicePrimaryCtxRelease,
	F_cuCtxSetCurrent,
	F_cuCtxSynchronize,
	F_cuMemGetInfo,
	F_cuMemAlloc,
	F_cuMemFree,
	F_cuMemHostAlloc,
	F_cuMemFreeHost,
	F_cuMemcpyHtoDAsync,
	F_cuMemcpyDtoHAsync,
	F_cuMemcpyDtoDAsync,
	F_cuMemsetD8Async,
	F_cuMemsetD32Async,
	F_cuStreamCreate,
	F_cuStreamDestroy,
	F_cuStreamSynchronize,
	F_cuStreamQuery,
	F_cuStreamWaitEvent,
	F_cuEventCreate,
	F_cuEventDestroy,
	F_cuEventRecord,
	F_cuEventSynchronize,
	F_cuEventQuery,
	F_cuEventElapsedTime,
	F_cuModuleLoadDataEx,
	F_cuModuleUnload,
	F_cuModuleGetFunction,
	F_cuFuncGetAttribute,
	F_cuFuncSetAttribute,
	F_cuLaunchKernel,
	F_cuStreamBeginCapture,
	F_cuStreamEndCapture,
	F_cuGraphInstantiateWithFlags,
	F_cuGraphLaunch,
	F_cuGraphExecDestroy,
	F_cuGraphDestroy,
	F_cuStreamIsCapturing,
	F_cuStreamWaitValue32,
	F_cuStreamWriteValue32,
	F_count
};

static void *cu_fn[F_count];

static void cu_set(int i, void *p) { cu_fn[i] = p; }

#define CU(name, ...) ((CUresult(*)(__VA_ARGS__))cu_fn[F_##name])

static CUresult cu_init(void) { return CU(cuInit, unsigned)(0); }

// CUDA graphs: stream capture (mode: CUstreamCaptureMode), instantiation
// (flags 0), launch and destruction. Handles are opaque pointers.
static CUresult cu_stream_begin_capture(uintptr_t s, int mode) {
	return CU(cuStreamBeginCapture, void *, int)((void *)s, mode);
}
static CUresult cu_stream_end_capture(uintptr_t s, uintptr_t *g) {
	void *h = NULL;
	CUresult r = CU(cuStreamEndCapture, void *, void **)((void *)s, &h);
	*g = (uintptr_t)h;
	return r;
}
static CUresult cu_graph_instantiate(uintptr_t g, uintptr_t *e) {
	void *h = NULL;
	CUresult r = CU(cuGraphInstantiateWithFlags, void **, void *, unsigned long long)(&h, (void *)g, 0);
	*e = (uintptr_t)h;
	return r;
}
static CUresult cu_graph_launch(uintptr_t e, uintptr_t s) { return CU(cuGraphLaunch, void *, void *)((void *)e, (void *)s); }
static CUresult cu_graph_exec_destroy(uintptr_t e) { return CU(cuGraphExecDestroy, void *)((void *)e); }
static CUresult cu_graph_destroy(uintptr_t g) { return CU(cuGraphDestroy, void *)((void *)g); }
// cu_stream_is_capturing stores the stream's CUstreamCaptureStatus
// (0 none, 1 active, 2 invalidated) in *st.
static CUresult cu_stream_is_capturing(uintptr_t s, int *st) {
	return CU(cuStreamIsCapturing, void *, int *)((void *)s, st);
}

static CUresult cu_driver_version(int *v) { return CU(cuDriverGetVersion, int *)(v); }

static CUresult cu_error_name(CUresult r, const char **s) {
	return CU(cuGetErrorName, CUresult, const char **)(r, s);
}

static CUresult cu_device_count(int *n) { return CU(cuDeviceGetCount, int *)(n); }

static CUresult cu_device_get(int *dev, int ordinal) {
	return CU(cuDeviceGet, int *, int)(dev, ordinal);
}

static CUresult cu_device_name(char *s, int n, int dev) {
	return CU(cuDeviceGetName, char *, int, int)(s, n, dev);
}

static CUresult cu_device_attribute(int *v, int attr, int dev) {
	return CU(cuDeviceGetAttribute, int *, int, int)(v, attr, dev);
}

static CUresult cu_device_total_mem(size_t *n, int dev) {
	return CU(cuDeviceTotalMem, size_t *, int)(n, dev);
}

static CUresult cu_device_pci_bus_id(char *s, int n, int dev) {
	return CU(cuDeviceGetPCIBusId, char *, int, int)(s, n, dev);
}

static CUresult cu_primary_ctx_retain(uintptr_t *ctx, int dev) {
	void *c = 0;
	CUresult r = CU(cuDevicePrimaryCtxRetain, void **, int)(&c, dev);
	*ctx = (uintptr_t)c;
	return r;
}

static CUresult cu_primary_ctx_release(int dev) { return CU(cuDevicePrimaryCtxRelease, int)(dev); }

static CUresult cu_ctx_set_current(uintptr_t ctx) {
	return CU(cuCtxSetCurrent, void *)((void *)ctx);
}

static CUresult cu_ctx_synchronize(void) { return CU(cuCtxSynchronize, void)(); }

static CUresult cu_mem_get_info(size_t *free, size_t *total) {
	return CU(cuMemGetInfo, size_t *, size_t *)(free, total);
}

static CUresult cu_mem_alloc(CUdeviceptr *p, size_t n) {
	return CU(cuMemAlloc, CUdeviceptr *, size_t)(p, n);
}

static CUresult cu_mem_free(CUdeviceptr p) { return CU(cuMemFree, CUdeviceptr)(p); }

static CUresult cu_mem_host_alloc(void **p, size_t n, unsigned flags) {
	return CU(cuMemHostAlloc, void **, size_t, unsigned)(p, n, flags);
}

static CUresult cu_mem_free_host(void *p) { return CU(cuMemFreeHost, void *)(p); }

static CUresult cu_memcpy_htod_async(CUdeviceptr dst, const void *src, size_t n, uintptr_t s) {
	return CU(cuMemcpyHtoDAsync, CUdeviceptr, const void *, size_t, void *)(dst, src, n, (void *)s);
}

static CUresult cu_memcpy_dtoh_async(void *dst, CUdeviceptr src, size_t n, uintptr_t s) {
	return CU(cuMemcpyDtoHAsync, void *, CUdeviceptr, size_t, void *)(dst, src, n, (void *)s);
}

static CUresult cu_memcpy_dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s) {
	return CU(cuMemcpyDtoDAsync, CUdeviceptr, CUdeviceptr, size_t, void *)(dst, src, n, (void *)s);
}

static CUresult cu_memset_d8_async(CUdeviceptr dst, unsigned char v, size_t n, uintptr_t s) {
	return CU(cuMemsetD8Async, CUdeviceptr, unsigned char, size_t, void *)(dst, v, n, (void *)s);
}

static CUresult cu_memset_d32_async(CUdeviceptr dst, unsigned v, size_t n, uintptr_t s) {
	return CU(cuMemsetD32Async, CUdeviceptr, unsigned, size_t, void *)(dst, v, n, (void *)s);
}

static CUresult cu_stream_create(uintptr_t *s, unsigned flags) {
	void *h = 0;
	CUresult r = CU(cuStreamCreate, void **, unsigned)(&h, flags);
	*s = (uintptr_t)h;
	return r;
}

static CUresult cu_stream_destroy(uintptr_t s) { return CU(cuStreamDestroy, void *)((void *)s); }

static CUresult cu_stream_synchronize(uintptr_t s) {
	return CU(cuStreamSynchronize, void *)((void *)s);
}

static CUresult cu_stream_query(uintptr_t s) { return CU(cuStreamQuery, void *)((void *)s); }

static CUresult cu_stream_wait_event(uintptr_t s, uintptr_t e) {
	return CU(cuStreamWaitEvent, void *, void *, unsigned)((void *)s, (void *)e, 0);
}

static CUresult cu_stream_wait_value32(uintptr_t s, CUdeviceptr addr, uint32_t v, unsigned flags) {
	return CU(cuStreamWaitValue32, void *, CUdeviceptr, uint32_t, unsigned)((void *)s, addr, v, flags);
}

static CUresult cu_stream_write_value32(uintptr_t s, CUdeviceptr addr, uint32_t v, unsigned flags) {
	return CU(cuStreamWriteValue32, void *, CUdeviceptr, uint32_t, unsigned)((void *)s, addr, v, flags);
}

static CUresult cu_event_create(uintptr_t *e, unsigned flags) {
	void *h = 0;
	CUresult r = CU(cuEventCreate, void **, unsigned)(&h, flags);
	*e = (uintptr_t)h;
	return r;
}

static CUresult cu_event_destroy(uintptr_t e) { return CU(cuEventDestroy, void *)((void *)e); }

static CUresult cu_event_record(uintptr_t e, uintptr_t s) {
	return CU(cuEventRecord, void *, void *)((void *)e, (void *)s);
}

static CUresult cu_event_synchronize(uintptr_t e) {
	return CU(cuEventSynchronize, void *)((void *)e);
}

static CUresult cu_event_query(uintptr_t e) { return CU(cuEventQuery, void *)((void *)e); }

static CUresult cu_event_elapsed(float *ms, uintptr_t start, uintptr_t end) {
	return CU(cuEventElapsedTime, float *, void *, void *)(ms, (void *)start, (void *)end);
}

// cu_module_load loads image (a NUL-terminated PTX text, which the JIT
// compiles, or a cubin) with the two JIT logs captured into the caller's buffers; their used lengths come back
// through info_n and err_n.
static CUresult cu_module_load(uintptr_t *m, const void *image, char *info, size_t *info_n,
                               char *err, size_t *err_n) {
	int opts[5] = {3, 4, 5, 6, 12}; // INFO_LOG_BUFFER, its size, ERROR_LOG_BUFFER, its size, LOG_VERBOSE
	void *vals[5] = {info, (void *)*info_n, err, (void *)*err_n, (void *)1};
	void *h = 0;
	CUresult r = CU(cuModuleLoadDataEx, void **, const void *, unsigned, int *, void **)(
		&h, image, 5, opts, vals);
	*m = (uintptr_t)h;
	*info_n = (size_t)vals[1];
	*err_n = (size_t)vals[3];
	return r;
}

static CUresult cu_module_unload(uintptr_t m) { return CU(cuModuleUnload, void *)((void *)m); }

static CUresult cu_module_function(uintptr_t *f, uintptr_t m, const char *name) {
	void *h = 0;
	CUresult r = CU(cuModuleGetFunction, void **, void *, const char *)(&h, (void *)m, name);
	*f = (uintptr_t)h;
	return r;
}

static CUresult cu_func_get_attribute(int *v, int attr, uintptr_t f) {
	return CU(cuFuncGetAttribute, int *, int, void *)(v, attr, (void *)f);
}

static CUresult cu_func_set_attribute(uintptr_t f, int attr, int v) {
	return CU(cuFuncSetAttribute, void *, int, int)((void *)f, attr, v);
}

static CUresult cu_launch(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shmem, uintptr_t s, void **params) {
	return CU(cuLaunchKernel, void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
	          unsigned, void *, void **, void **)((void *)f, gx, gy, gz, bx, by, bz, shmem,
	                                              (void *)s, params, 0);
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/distopt/distopt/internal/dl"
)

// symbols lists the driver entry points in the order of the C enum above,
// with the versioned names that cuda.h maps the plain names to.
var symbols = [C.F_count]string{
	C.F_cuInit:                    "cuInit",
	C.F_cuDriverGetVersion:        "cuDriverGetVersion",
	C.F_cuGetErrorName:            "cuGetErrorName",
	C.F_cuDeviceGetCount:          "cuDeviceGetCount",
	C.F_cuDeviceGet:               "cuDeviceGet",
	C.F_cuDeviceGetName:           "cuDeviceGetName",
	C.F_cuDeviceGetAttribute:      "cuDeviceGetAttribute",
	C.F_cuDeviceTotalMem:          "cuDeviceTotalMem_v2",
	C.F_cuDeviceGetPCIBusId:       "cuDeviceGetPCIBusId",
	C.F_cuDevicePrimaryCtxRetain:  "cuDevicePrimaryCtxRetain",
	C.F_cuDevicePrimaryCtxRelease: "cuDevicePrimaryCtxRelease_v2",
	C.F_cuCtxSetCurrent:           "cuCtxSetCurrent",
	C.F_cuCtxSynchronize:          "cuCtxSynchronize",
	C.F_cuMemGetInfo:              "cuMemGetInfo_v2",
	C.F_cuMemAlloc:                "cuMemAlloc_v2",
	C.F_cuMemFree:                 "cuMemFree_v2",
	C.F_cuMemHostAlloc:            "cuMemHostAlloc",
	C.F_cuMemFreeHost:             "cuMemFreeHost",
	C.F_cuMemcpyHtoDAsync:         "cuMemcpyHtoDAsync_v2",
	C.F_cuMemcpyDtoHAsync:         "cuMemcpyDtoHAsync_v2",
	C.F_cuMemcpyDtoDAsync:         "cuMemcpyDtoDAsync_v2",
	C.F_cuMemsetD8Async:           "cuMemsetD8Async",
	C.F_cuMemsetD32Async:          "cuMemsetD32Async",
	C.F_cuStreamCreate:            "cuStreamCreate",
	C.F_cuStreamDestroy:           "cuStreamDestroy_v2",
	C.F_cuStreamSynchronize:       "cuStreamSynchronize",
	C.F_cuStreamQuery:             "cuStreamQuery",
	C.F_cuStreamWaitEvent:         "cuStreamWaitEvent",
	C.F_cuEventCreate:             "cuEventCreate",
	C.F_cuEventDestroy:            "cuEventDestroy_v2",
	C.F_cuEventRecord:             "cuEventRecord",
	C.F_cuEventSynchronize:        "cuEventSynchronize",
	C.F_cuEventQuery:              "cuEventQuery",
	C.F_cuEventElapsedTime:        "cuEventElapsedTime",
	C.F_cuModuleLoadDataEx:        "cuModuleLoadDataEx",
	C.F_cuModuleUnload:            "cuModuleUnload",
	C.F_cuModuleGetFunction:       "cuModuleGetFunction",
	C.F_cuFuncGetAttribute:        "cuFuncGetAttribute",
	C.F_cuFuncSetAttribute:        "cuFuncSetAttribute",
	C.F_cuLaunchKernel:            "cuLaunchKernel",
	// CUDA graphs (cuGraphInstantiateWithFlags: CUDA 11.4 on).
	C.F_cuStreamBeginCapture:        "cuStreamBeginCapture_v2",
	C.F_cuStreamEndCapture:          "cuStreamEndCapture",
	C.F_cuGraphInstantiateWithFlags: "cuGraphInstantiateWithFlags",
	C.F_cuGraphLaunch:               "cuGraphLaunch",
	C.F_cuGraphExecDestroy:          "cuGraphExecDestroy",
	C.F_cuGraphDestroy:              "cuGraphDestroy",
	C.F_cuStreamIsCapturing:         "cuStreamIsCapturing",
	// Stream memory operations (the _v2 entry points: CUDA 11.7 on, on
	// every device without an opt-in).
	C.F_cuStreamWaitValue32:  "cuStreamWaitValue32_v2",
	C.F_cuStreamWriteValue32: "cuStreamWriteValue32_v2",
}

// openDriver opens the driver library and fills the C table. It is called
// once, under driverOnce.
func openDriver(path string) error {
	lib, err := dl.Open(path, dl.Now|dl.Local)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	for i, name := range symbols {
		p, err := lib.Lookup(name)
		if err != nil {
			lib.Close()
			return fmt.Errorf("%w: %s lacks %s: %w", ErrNoDriver, path, name, err)
		}
		C.cu_set(C.int(i), p)
	}
	// The library stays open for the life of the process.
	return nil
}

// gettid returns the id of the calling OS thread.
func gettid() int64 { return int64(syscall.Gettid()) }

func cuInit() Result { return Result(C.cu_init()) }

func cuDriverGetVersion() (int, Result) {
	var v C.int
	r := C.cu_driver_version(&v)
	return int(v), Result(r)
}

// cuGetErrorName returns the enum name of r, or "" when the driver does not
// know it.
func cuGetErrorName(r Result) string {
	var s *C.char
	if C.cu_error_name(C.CUresult(r), &s) != 0 || s == nil {
		return ""
	}
	return C.GoString(s)
}

func cuDeviceGetCount() (int, Result) {
	var n C.int
	r := C.cu_device_count(&n)
	return int(n), Result(r)
}

func cuDeviceGet(ordinal int) (int, Result) {
	var d C.int
	r := C.cu_device_get(&d, C.int(ordinal))
	return int(d), Result(r)
}

func cuDeviceGetName(dev int) (string, Result) {
	var buf [256]C.char
	r := C.cu_device_name(&buf[0], C.int(len(buf)), C.int(dev))
	return C.GoString(&buf[0]), Result(r)
}

func cuDeviceGetAttribute(attr deviceAttribute, dev int) (int, Result) {
	var v C.int
	r := C.cu_device_attribute(&v, C.int(attr), C.int(dev))
	return int(v), Result(r)
}

func cuDeviceTotalMem(dev int) (uint64, Result) {
	var n C.size_t
	r := C.cu_device_total_mem(&n, C.int(dev))
	return uint64(n), Result(r)
}

func cuDeviceGetPCIBusID(dev int) (string, Result) {
	var buf [64]C.char
	r := C.cu_device_pci_bus_id(&buf[0], C.int(len(buf)), C.int(dev))
	return C.GoString(&buf[0]), Result(r)
}

func cuDevicePrimaryCtxRetain(dev int) (uintptr, Result) {
	var c C.uintptr_t
	r := C.cu_primary_ctx_retain(&c, C.int(dev))
	return uintptr(c), Result(r)
}

func cuDevicePrimaryCtxRelease(dev int) Result { return Result(C.cu_primary_ctx_release(C.int(dev))) }

func cuCtxSetCurrent(ctx uintptr) Result { return Result(C.cu_ctx_set_current(C.uintptr_t(ctx))) }

func cuCtxSynchronize() Result { return Result(C.cu_ctx_synchronize()) }

func cuMemGetInfo() (free, total uint64, r Result) {
	var f, t C.size_t
	r = Result(C.cu_mem_get_info(&f, &t))
	return uint64(f), uint64(t), r
}

func cuMemAlloc(n int) (DevicePtr, Result) {
	var p C.CUdeviceptr
	r := C.cu_mem_alloc(&p, C.size_t(n))
	return DevicePtr(p), Result(r)
}

func cuMemFree(p DevicePtr) Result { return Result(C.cu_mem_free(C.CUdeviceptr(p))) }

func cuMemHostAlloc(n int, flags uint32) (unsafe.Pointer, Result) {
	var p unsafe.Pointer
	r := C.cu_mem_host_alloc(&p, C.size_t(n), C.unsigned(flags))
	return p, Result(r)
}

func cuMemFreeHost(p unsafe.Pointer) Result { return Result(C.cu_mem_free_host(p)) }

func cuMemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n int, s uintptr) Result {
	return Result(C.cu_memcpy_htod_async(C.CUdeviceptr(dst), src, C.size_t(n), C.uintptr_t(s)))
}

func cuMemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n int, s uintptr) Result {
	return Result(C.cu_memcpy_dtoh_async(dst, C.CUdeviceptr(src), C.size_t(n), C.uintptr_t(s)))
}

func cuMemcpyDtoDAsync(dst, src DevicePtr, n int, s uintptr) Result {
	return Result(C.cu_memcpy_dtod_async(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), C.uintptr_t(s)))
}

func cuMemsetD8Async(dst DevicePtr, v uint8, n int, s uintptr) Result {
	return Result(C.cu_memset_d8_async(C.CUdeviceptr(dst), C.uchar(v), C.size_t(n), C.uintptr_t(s)))
}

func cuMemsetD32Async(dst DevicePtr, v uint32, n int, s uintptr) Result {
	return Result(C.cu_memset_d32_async(C.CUdeviceptr(dst), C.unsigned(v), C.size_t(n), C.uintptr_t(s)))
}

func cuStreamCreate(flags uint32) (uintptr, Result) {
	var s C.uintptr_t
	r := C.cu_stream_create(&s, C.unsigned(flags))
	return uintptr(s), Result(r)
}

func cuStreamDestroy(s uintptr) Result { return Result(C.cu_stream_destroy(C.uintptr_t(s))) }

func cuStreamSynchronize(s uintptr) Result {
	return Result(C.cu_stream_synchronize(C.uintptr_t(s)))
}

func cuStreamQuery(s uintptr) Result { return Result(C.cu_stream_query(C.uintptr_t(s))) }

func cuStreamWaitEvent(s, e uintptr) Result {
	return Result(C.cu_stream_wait_event(C.uintptr_t(s), C.uintptr_t(e)))
}

func cuStreamWaitValue32(s uintptr, addr DevicePtr, v, flags uint32) Result {
	return Result(C.cu_stream_wait_value32(C.uintptr_t(s), C.CUdeviceptr(addr), C.uint32_t(v), C.unsigned(flags)))
}

func cuStreamWriteValue32(s uintptr, addr DevicePtr, v, flags uint32) Result {
	return Result(C.cu_stream_write_value32(C.uintptr_t(s), C.CUdeviceptr(addr), C.uint32_t(v), C.unsigned(flags)))
}

func cuEventCreate(flags uint32) (uintptr, Result) {
	var e C.uintptr_t
	r := C.cu_event_create(&e, C.unsigned(flags))
	return uintptr(e), Result(r)
}

func cuEventDestroy(e uintptr) Result { return Result(C.cu_event_destroy(C.uintptr_t(e))) }

func cuEventRecord(e, s uintptr) Result {
	return Result(C.cu_event_record(C.uintptr_t(e), C.uintptr_t(s)))
}

func cuEventSynchronize(e uintptr) Result { return Result(C.cu_event_synchronize(C.uintptr_t(e))) }

func cuEventQuery(e uintptr) Result { return Result(C.cu_event_query(C.uintptr_t(e))) }

func cuEventElapsedTime(start, end uintptr) (float32, Result) {
	var ms C.float
	r := C.cu_event_elapsed(&ms, C.uintptr_t(start), C.uintptr_t(end))
	return float32(ms), Result(r)
}

// jitLogSize is the size of each JIT log buffer.
const jitLogSize = 16 << 10

// cuModuleLoadData loads a PTX or cubin image and returns the module with
// the JIT's info and error logs. The NUL ending PTX text is harmless after
// a cubin, whose header gives its size.
func cuModuleLoadData(img []byte) (m uintptr, info, errLog string, r Result) {
	image := C.CBytes(append(img[:len(img):len(img)], 0))
	defer C.free(image)
	infoBuf := (*C.char)(C.malloc(jitLogSize))
	defer C.free(unsafe.Pointer(infoBuf))
	errBuf := (*C.char)(C.malloc(jitLogSize))
	defer C.free(unsafe.Pointer(errBuf))
	infoN, errN := C.size_t(jitLogSize), C.size_t(jitLogSize)
	var h C.uintptr_t
	r = Result(C.cu_module_load(&h, image, infoBuf, &infoN, errBuf, &errN))
	return uintptr(h), logString(infoBuf, infoN), logString(errBuf, errN), r
}

// logString reads a JIT log of at most n bytes, stopping at its NUL.
func logString(p *C.char, n C.size_t) string {
	if n == 0 {
		return ""
	}
	n = min(n, jitLogSize)
	b := C.GoBytes(unsafe.Pointer(p), C.int(n))
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
	}
	return string(b)
}

func cuModuleUnload(m uintptr) Result { return Result(C.cu_module_unload(C.uintptr_t(m))) }

func cuModuleGetFunction(m uintptr, name string) (uintptr, Result) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	r := C.cu_module_function(&f, C.uintptr_t(m), cname)
	return uintptr(f), Result(r)
}

func cuFuncGetAttribute(attr FuncAttribute, f uintptr) (int, Result) {
	var v C.int
	r := C.cu_func_get_attribute(&v, C.int(attr), C.uintptr_t(f))
	return int(v), Result(r)
}

func cuFuncSetAttribute(f uintptr, attr FuncAttribute, v int) Result {
	return Result(C.cu_func_set_attribute(C.uintptr_t(f), C.int(attr), C.int(v)))
}

// cuLaunchKernel launches f with the arguments packed in a. The argument
// values and the pointer array handed to the driver live in C memory, so no
// Go pointer crosses into C.
func cuLaunchKernel(f uintptr, grid, block Dim3, shmem int, s uintptr, a *Args) Result {
	n := len(a.offsets)
	var mem unsafe.Pointer
	if len(a.buf) > 0 {
		mem = C.CBytes(a.buf)
		defer C.free(mem)
	}
	var params unsafe.Pointer
	if n > 0 {
		params = C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(uintptr(0))))
		defer C.free(params)
		ptrs := unsafe.Slice((*unsafe.Pointer)(params), n)
		for i, off := range a.offsets {
			ptrs[i] = unsafe.Add(mem, off)
		}
	}
	return Result(C.cu_launch(C.uintptr_t(f),
		C.unsigned(grid.X), C.unsigned(grid.Y), C.unsigned(grid.Z),
		C.unsigned(block.X), C.unsigned(block.Y), C.unsigned(block.Z),
		C.unsigned(shmem), C.uintptr_t(s), (*unsafe.Pointer)(params)))
}

func cuStreamBeginCapture(s uintptr, mode int) Result {
	return Result(C.cu_stream_begin_capture(C.uintptr_t(s), C.int(mode)))
}

func cuStreamEndCapture(s uintptr) (uintptr, Result) {
	var g C.uintptr_t
	r := C.cu_stream_end_capture(C.uintptr_t(s), &g)
	return uintptr(g), Result(r)
}

func cuGraphInstantiate(g uintptr) (uintptr, Result) {
	var e C.uintptr_t
	r := C.cu_graph_instantiate(C.uintptr_t(g), &e)
	return uintptr(e), Result(r)
}

func cuGraphLaunch(e, s uintptr) Result {
	return Result(C.cu_graph_launch(C.uintptr_t(e), C.uintptr_t(s)))
}

func cuGraphExecDestroy(e uintptr) Result { return Result(C.cu_graph_exec_destroy(C.uintptr_t(e))) }

func cuGraphDestroy(g uintptr) Result { return Result(C.cu_graph_destroy(C.uintptr_t(g))) }

func cuStreamIsCapturing(s uintptr) (int, Result) {
	var st C.int
	r := C.cu_stream_is_capturing(C.uintptr_t(s), &st)
	return int(st), Result(r)
}
