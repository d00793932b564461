//go:build cgo && linux

package nccl

// This file is the only one of the package that talks to C. It declares the
// few NCCL types it needs (no NCCL or CUDA header is included), keeps the
// addresses that dlsym returned in a table per library, and calls through
// them. Handles (ncclComm_t, cudaStream_t) cross into Go as uintptr values.

/*
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;

// nccl_config is ncclConfig_t as NCCL 2.18 declares it. NCCL copies the
// first `size` bytes and keeps its defaults for any field it has beyond.
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char *netName;
	int splitShare;
} nccl_config;

enum {
	F_ncclGetVersion,
	F_ncclGetErrorString,
	F_ncclGetLastError,
	F_ncclGetUniqueId,
	F_ncclCommInitRankConfig,
	F_ncclCommGetAsyncError,
	F_ncclCommCount,
	F_ncclCommUserRank,
	F_ncclCommCuDevice,
	F_ncclCommFinalize,
	F_ncclCommDestroy,
	F_ncclCommAbort,
	F_ncclGroupStart,
	F_ncclGroupEnd,
	F_ncclAllGather,
	F_ncclReduceScatter,
	F_ncclAllReduce,
	F_ncclBroadcast,
	F_ncclSend,
	F_ncclRecv,
	F_count
};

#define NC(t, name, ...) ((ncclResult_t(*)(__VA_ARGS__))(t)[F_##name])

static void **nc_table(void) { return (void **)calloc(F_count, sizeof(void *)); }

static void nc_set(void **t, int i, void *p) { t[i] = p; }

static ncclResult_t nc_get_version(void **t, int *v) { return NC(t, ncclGetVersion, int *)(v); }

static const char *nc_error_string(void **t, ncclResult_t r) {
	return ((const char *(*)(ncclResult_t))t[F_ncclGetErrorString])(r);
}

static const char *nc_last_error(void **t, uintptr_t comm) {
	return ((const char *(*)(void *))t[F_ncclGetLastError])((void *)comm);
}

static ncclResult_t nc_get_unique_id(void **t, ncclUniqueId *id) {
	return NC(t, ncclGetUniqueId, ncclUniqueId *)(id);
}

static ncclResult_t nc_comm_init_rank_config(void **t, uintptr_t *comm, int nranks,
                                             const ncclUniqueId *id, int rank, int blocking,
                                             int cga, int minCTAs, int maxCTAs,
                                             const char *netName) {
	nccl_config cfg = {sizeof(nccl_config), 0xcafebeef, 21800, blocking, cga, minCTAs, maxCTAs,
	                   netName, INT_MIN};
	void *c = 0;
	ncclResult_t r = NC(t, ncclCommInitRankConfig, void **, int, ncclUniqueId, int, nccl_config *)(
		&c, nranks, *id, rank, &cfg);
	*comm = (uintptr_t)c;
	return r;
}

static ncclResult_t nc_comm_get_async_error(void **t, uintptr_t comm, ncclResult_t *state) {
	return NC(t, ncclCommGetAsyncError, void *, ncclResult_t *)((void *)comm, state);
}

static ncclResult_t nc_comm_query(void **t, int which, uintptr_t comm, int *v) {
	switch (which) {
	case 0: return NC(t, ncclCommCount, void *, int *)((void *)comm, v);
	case 1: return NC(t, ncclCommUserRank, void *, int *)((void *)comm, v);
	default: return NC(t, ncclCommCuDevice, void *, int *)((void *)comm, v);
	}
}

static ncclResult_t nc_comm_finalize(void **t, uintptr_t comm) {
	return NC(t, ncclCommFinalize, void *)((void *)comm);
}

static ncclResult_t nc_comm_destroy(void **t, uintptr_t comm) {
	return NC(t, ncclCommDestroy, void *)((void *)comm);
}

static ncclResult_t nc_comm_abort(void **t, uintptr_t comm) {
	return NC(t, ncclCommAbort, void *)((void *)comm);
}

static ncclResult_t nc_group_start(void **t) { return NC(t, ncclGroupStart, void)(); }

static ncclResult_t nc_group_end(void **t) { return NC(t, ncclGroupEnd, void)(); }

static ncclResult_t nc_collective(void **t, int kind, uintptr_t send, uintptr_t recv, size_t count,
                                  int dt, int op, int root, uintptr_t comm, uintptr_t stream) {
	void *s = (void *)send, *d = (void *)recv, *c = (void *)comm, *st = (void *)stream;
	switch (kind) {
	case 0:
		return NC(t, ncclAllGather, const void *, void *, size_t, int, void *, void *)(
			s, d, count, dt, c, st);
	case 1:
		return NC(t, ncclReduceScatter, const void *, void *, size_t, int, int, void *, void *)(
			s, d, count, dt, op, c, st);
	case 2:
		return NC(t, ncclAllReduce, const void *, void *, size_t, int, int, void *, void *)(
			s, d, count, dt, op, c, st);
	case 3:
		return NC(t, ncclBroadcast, const void *, void *, size_t, int, int, void *, void *)(
			s, d, count, dt, root, c, st);
	case 4:
		return NC(t, ncclSend, const void *, size_t, int, int, void *, void *)(
			s, count, dt, root, c, st);
	default:
		return NC(t, ncclRecv, void *, size_t, int, int, void *, void *)(
			d, count, dt, root, c, st);
	}
}
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/distopt/distopt/internal/dl"
)

// fnTable holds the C table of one library's entry points.
type fnTable struct{ t *unsafe.Pointer }

// symbols lists the NCCL entry points in the order of the C enum above.
var symbols = [C.F_count]string{
	C.F_ncclGetVersion:         "ncclGetVersion",
	C.F_ncclGetErrorString:     "ncclGetErrorString",
	C.F_ncclGetLastError:       "ncclGetLastError",
	C.F_ncclGetUniqueId:        "ncclGetUniqueId",
	C.F_ncclCommInitRankConfig: "ncclCommInitRankConfig",
	C.F_ncclCommGetAsyncError:  "ncclCommGetAsyncError",
	C.F_ncclCommCount:          "ncclCommCount",
	C.F_ncclCommUserRank:       "ncclCommUserRank",
	C.F_ncclCommCuDevice:       "ncclCommCuDevice",
	C.F_ncclCommFinalize:       "ncclCommFinalize",
	C.F_ncclCommDestroy:        "ncclCommDestroy",
	C.F_ncclCommAbort:          "ncclCommAbort",
	C.F_ncclGroupStart:         "ncclGroupStart",
	C.F_ncclGroupEnd:           "ncclGroupEnd",
	C.F_ncclAllGather:          "ncclAllGather",
	C.F_ncclReduceScatter:      "ncclReduceScatter",
	C.F_ncclAllReduce:          "ncclAllReduce",
	C.F_ncclBroadcast:          "ncclBroadcast",
	C.F_ncclSend:               "ncclSend",
	C.F_ncclRecv:               "ncclRecv",
}

// openTable opens the library at path and resolves every entry point.
func openTable(path string) (*fnTable, error) {
	lib, err := dl.Open(path, dl.Now|dl.Local)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoLibrary, err)
	}
	t := C.nc_table()
	for i, name := range symbols {
		p, err := lib.Lookup(name)
		if err != nil {
			C.free(unsafe.Pointer(t))
			lib.Close()
			return nil, fmt.Errorf("%w: %s lacks %s: %w", ErrNoLibrary, path, name, err)
		}
		C.nc_set(t, C.int(i), p)
	}
	// The library and its table stay for the life of the process.
	return &fnTable{t: t}, nil
}

func (l *Library) tab() *unsafe.Pointer { return l.fns.t }

func (l *Library) getVersion() (int, error) {
	var v C.int
	if r := Result(C.nc_get_version(l.tab(), &v)); r != Success {
		return 0, &Error{Op: "ncclGetVersion", Code: r}
	}
	return int(v), nil
}

func (l *Library) errorString(r Result) string {
	s := C.nc_error_string(l.tab(), C.ncclResult_t(r))
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// lastError returns ncclGetLastError for comm (nil: the process's last).
func (l *Library) lastError(comm *Comm) string {
	var h uintptr
	if comm != nil {
		h = comm.h
	}
	s := C.nc_last_error(l.tab(), C.uintptr_t(h))
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

func (l *Library) getUniqueID(id *UniqueID) Result {
	var cid C.ncclUniqueId
	r := Result(C.nc_get_unique_id(l.tab(), &cid))
	copy(id[:], C.GoBytes(unsafe.Pointer(&cid), UniqueIDBytes))
	return r
}

// undefInt is NCCL_CONFIG_UNDEF_INT, the "not set" value of config fields.
const undefInt = math.MinInt32

func orUndef(v int) C.int {
	if v == 0 {
		return undefInt
	}
	return C.int(v)
}

func (l *Library) commInitRankConfig(nranks int, id *UniqueID, rank int, cfg Config) (uintptr, Result) {
	var cid C.ncclUniqueId
	C.memcpy(unsafe.Pointer(&cid), unsafe.Pointer(&id[0]), UniqueIDBytes)
	blocking := C.int(0)
	if cfg.Blocking {
		blocking = 1
	}
	var net *C.char
	if cfg.NetName != "" {
		// NCCL keeps the pointer (it copies the string in recent
		// releases, not in all): the name lives as long as the process.
		net = C.CString(cfg.NetName)
	}
	var h C.uintptr_t
	r := C.nc_comm_init_rank_config(l.tab(), &h, C.int(nranks), &cid, C.int(rank), blocking,
		orUndef(cfg.CGAClusterSize), orUndef(cfg.MinCTAs), orUndef(cfg.MaxCTAs), net)
	return uintptr(h), Result(r)
}

func (l *Library) commGetAsyncError(h uintptr) (state, r Result) {
	var s C.ncclResult_t
	r = Result(C.nc_comm_get_async_error(l.tab(), C.uintptr_t(h), &s))
	return Result(s), r
}

func (l *Library) commQuery(q commQueryKind, h uintptr) (int, Result) {
	var v C.int
	r := C.nc_comm_query(l.tab(), C.int(q), C.uintptr_t(h), &v)
	return int(v), Result(r)
}

func (l *Library) commFinalize(h uintptr) Result {
	return Result(C.nc_comm_finalize(l.tab(), C.uintptr_t(h)))
}

func (l *Library) commDestroy(h uintptr) Result {
	return Result(C.nc_comm_destroy(l.tab(), C.uintptr_t(h)))
}

func (l *Library) commAbort(h uintptr) Result {
	return Result(C.nc_comm_abort(l.tab(), C.uintptr_t(h)))
}

func (l *Library) groupStart() Result { return Result(C.nc_group_start(l.tab())) }

func (l *Library) groupEnd() Result { return Result(C.nc_group_end(l.tab())) }

func (l *Library) collective(k collKind, send, recv uintptr, count int, dt DataType, op RedOp, root int, comm, stream uintptr) Result {
	return Result(C.nc_collective(l.tab(), C.int(k), C.uintptr_t(send), C.uintptr_t(recv),
		C.size_t(count), C.int(dt), C.int(op), C.int(root), C.uintptr_t(comm), C.uintptr_t(stream)))
}
