//go:build cgo && linux

package cublaslt

// This is the only file of the package that talks to C. It declares the few
// cuBLASLt types it needs (no CUDA header is included), keeps the addresses
// dlsym returned in a table, and calls through them. Handles cross into Go
// as uintptr values.

/*
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef int lt_status;

// lt_heuristic is cublasLtMatmulHeuristicResult_t: the opaque algorithm
// (cublasLtMatmulAlgo_t, 8 x uint64), its workspace, state and waves.
typedef struct {
	uint64_t algo[8];
	size_t workspaceSize;
	lt_status state;
	float wavesCount;
	int reserved[4];
} lt_heuristic;

enum {
	F_GetVersion,
	F_Create,
	F_Destroy,
	F_DescCreate,
	F_DescDestroy,
	F_DescSetAttribute,
	F_LayoutCreate,
	F_LayoutDestroy,
	F_LayoutSetAttribute,
	F_PrefCreate,
	F_PrefDestroy,
	F_PrefSetAttribute,
	F_AlgoGetHeuristic,
	F_Matmul,
	F_count
};

static void **lt_table(void) { return (void **)calloc(F_count, sizeof(void *)); }
static void lt_set(void **t, int i, void *p) { t[i] = p; }

static size_t lt_get_version(void **t) { return ((size_t(*)(void))t[F_GetVersion])(); }

static lt_status lt_create(void **t, uintptr_t *h) {
	void *p = 0;
	lt_status s = ((lt_status(*)(void **))t[F_Create])(&p);
	*h = (uintptr_t)p;
	return s;
}

static lt_status lt_destroy(void **t, uintptr_t h) {
	return ((lt_status(*)(void *))t[F_Destroy])((void *)h);
}

static lt_status lt_desc_create(void **t, uintptr_t *d, int compute, int scaleType) {
	void *p = 0;
	lt_status s = ((lt_status(*)(void **, int, int))t[F_DescCreate])(&p, compute, scaleType);
	*d = (uintptr_t)p;
	return s;
}

static lt_status lt_desc_destroy(void **t, uintptr_t d) {
	return ((lt_status(*)(void *))t[F_DescDestroy])((void *)d);
}

static lt_status lt_desc_set(void **t, uintptr_t d, int attr, const void *buf, size_t n) {
	return ((lt_status(*)(void *, int, const void *, size_t))t[F_DescSetAttribute])((void *)d, attr, buf, n);
}

static lt_status lt_desc_set_i32(void **t, uintptr_t d, int attr, int32_t v) {
	return lt_desc_set(t, d, attr, &v, sizeof v);
}

static lt_status lt_desc_set_i8(void **t, uintptr_t d, int attr, int8_t v) {
	return lt_desc_set(t, d, attr, &v, sizeof v);
}

static lt_status lt_desc_set_ptr(void **t, uintptr_t d, int attr, uintptr_t v) {
	void *p = (void *)v;
	return lt_desc_set(t, d, attr, &p, sizeof p);
}

static lt_status lt_layout_create(void **t, uintptr_t *l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
	void *p = 0;
	lt_status s = ((lt_status(*)(void **, int, uint64_t, uint64_t, int64_t))t[F_LayoutCreate])(
		&p, type, rows, cols, ld);
	*l = (uintptr_t)p;
	return s;
}

static lt_status lt_layout_set(void **t, uintptr_t l, int attr, const void *buf, size_t n) {
	return ((lt_status(*)(void *, int, const void *, size_t))t[F_LayoutSetAttribute])((void *)l, attr, buf, n);
}

// lt_layout_batch sets the batch count (int32) and the stride in elements
// between consecutive matrices (int64) of a layout.
static lt_status lt_layout_batch(void **t, uintptr_t l, int32_t count, int64_t stride) {
	lt_status s = lt_layout_set(t, l, 5, &count, sizeof count);
	if (s != 0) return s;
	return lt_layout_set(t, l, 6, &stride, sizeof stride);
}

static lt_status lt_layout_destroy(void **t, uintptr_t l) {
	return ((lt_status(*)(void *))t[F_LayoutDestroy])((void *)l);
}

// lt_pref_create makes a preference with a workspace limit and, for each
// of A, B, C, D whose align[i] is not 0, its minimum buffer alignment in
// bytes (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i).
static lt_status lt_pref_create(void **t, uintptr_t *p, uint64_t workspace, const uint32_t *align) {
	void *q = 0;
	lt_status s = ((lt_status(*)(void **))t[F_PrefCreate])(&q);
	*p = (uintptr_t)q;
	if (s != 0) return s;
	lt_status (*set)(void *, int, const void *, size_t) =
		(lt_status(*)(void *, int, const void *, size_t))t[F_PrefSetAttribute];
	s = set(q, 1, &workspace, sizeof workspace);
	for (int i = 0; i < 4 && s == 0; i++) {
		if (align[i] != 0) s = set(q, 5 + i, &align[i], sizeof align[i]);
	}
	return s;
}

static lt_status lt_pref_destroy(void **t, uintptr_t p) {
	return ((lt_status(*)(void *))t[F_PrefDestroy])((void *)p);
}

static lt_status lt_heuristic_query(void **t, uintptr_t h, uintptr_t desc, uintptr_t a, uintptr_t b,
                                    uintptr_t c, uintptr_t d, uintptr_t pref, int want,
                                    lt_heuristic *res, int *got) {
	return ((lt_status(*)(void *, void *, void *, void *, void *, void *, void *, int, lt_heuristic *,
	                      int *))t[F_AlgoGetHeuristic])((void *)h, (void *)desc, (void *)a, (void *)b,
	                                                    (void *)c, (void *)d, (void *)pref, want, res,
	                                                    got);
}

static lt_status lt_matmul(void **t, uintptr_t h, uintptr_t desc, float alpha, uintptr_t A,
                           uintptr_t Adesc, uintptr_t B, uintptr_t Bdesc, float beta, uintptr_t C,
                           uintptr_t Cdesc, uintptr_t D, uintptr_t Ddesc, const uint64_t *algo,
                           uintptr_t ws, size_t wsSize, uintptr_t stream) {
	return ((lt_status(*)(void *, void *, const void *, const void *, void *, const void *, void *,
	                      const void *, const void *, void *, void *, void *, const void *, void *,
	                      size_t, void *))t[F_Matmul])(
		(void *)h, (void *)desc, &alpha, (const void *)A, (void *)Adesc, (const void *)B,
		(void *)Bdesc, &beta, (const void *)C, (void *)Cdesc, (void *)D, (void *)Ddesc, algo,
		(void *)ws, wsSize, (void *)stream);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/distopt/distopt/internal/dl"
)

// fnTable holds the C table of the library's entry points.
type fnTable struct{ t *unsafe.Pointer }

var symbols = [C.F_count]string{
	C.F_GetVersion:         "cublasLtGetVersion",
	C.F_Create:             "cublasLtCreate",
	C.F_Destroy:            "cublasLtDestroy",
	C.F_DescCreate:         "cublasLtMatmulDescCreate",
	C.F_DescDestroy:        "cublasLtMatmulDescDestroy",
	C.F_DescSetAttribute:   "cublasLtMatmulDescSetAttribute",
	C.F_LayoutCreate:       "cublasLtMatrixLayoutCreate",
	C.F_LayoutDestroy:      "cublasLtMatrixLayoutDestroy",
	C.F_LayoutSetAttribute: "cublasLtMatrixLayoutSetAttribute",
	C.F_PrefCreate:         "cublasLtMatmulPreferenceCreate",
	C.F_PrefDestroy:        "cublasLtMatmulPreferenceDestroy",
	C.F_PrefSetAttribute:   "cublasLtMatmulPreferenceSetAttribute",
	C.F_AlgoGetHeuristic:   "cublasLtMatmulAlgoGetHeuristic",
	C.F_Matmul:             "cublasLtMatmul",
}

// openTable opens the library at path and resolves every entry point.
func openTable(path string) (*fnTable, error) {
	lib, err := dl.Open(path, dl.Now|dl.Local)
	if err != nil {
		return nil, err
	}
	t := C.lt_table()
	for i, name := range symbols {
		p, err := lib.Lookup(name)
		if err != nil {
			C.free(unsafe.Pointer(t))
			lib.Close()
			return nil, fmt.Errorf("%s lacks %s: %w", path, name, err)
		}
		C.lt_set(t, C.int(i), p)
	}
	// The library and its table stay for the life of the process.
	return &fnTable{t: t}, nil
}

func (f *fnTable) version() int { return int(C.lt_get_version(f.t)) }

func (f *fnTable) create() (uintptr, Status) {
	var h C.uintptr_t
	s := C.lt_create(f.t, &h)
	return uintptr(h), Status(s)
}

func (f *fnTable) destroy(h uintptr) Status { return Status(C.lt_destroy(f.t, C.uintptr_t(h))) }

func (f *fnTable) descCreate(c ComputeType, scale DataType) (uintptr, Status) {
	var d C.uintptr_t
	s := C.lt_desc_create(f.t, &d, C.int(c), C.int(scale))
	return uintptr(d), Status(s)
}

func (f *fnTable) descDestroy(d uintptr) Status {
	return Status(C.lt_desc_destroy(f.t, C.uintptr_t(d)))
}

func (f *fnTable) descSetI32(d uintptr, a descAttr, v int32) Status {
	return Status(C.lt_desc_set_i32(f.t, C.uintptr_t(d), C.int(a), C.int32_t(v)))
}

func (f *fnTable) descSetI8(d uintptr, a descAttr, v int8) Status {
	return Status(C.lt_desc_set_i8(f.t, C.uintptr_t(d), C.int(a), C.int8_t(v)))
}

func (f *fnTable) descSetPtr(d uintptr, a descAttr, p uint64) Status {
	return Status(C.lt_desc_set_ptr(f.t, C.uintptr_t(d), C.int(a), C.uintptr_t(p)))
}

func (f *fnTable) layoutCreate(t DataType, rows, cols uint64, ld int64) (uintptr, Status) {
	var l C.uintptr_t
	s := C.lt_layout_create(f.t, &l, C.int(t), C.uint64_t(rows), C.uint64_t(cols), C.int64_t(ld))
	return uintptr(l), Status(s)
}

func (f *fnTable) layoutBatch(l uintptr, count int32, stride int64) Status {
	return Status(C.lt_layout_batch(f.t, C.uintptr_t(l), C.int32_t(count), C.int64_t(stride)))
}

func (f *fnTable) layoutDestroy(l uintptr) Status {
	return Status(C.lt_layout_destroy(f.t, C.uintptr_t(l)))
}

func (f *fnTable) prefCreate(workspace uint64, align [4]uint32) (uintptr, Status) {
	var p C.uintptr_t
	var a [4]C.uint32_t
	for i, v := range align {
		a[i] = C.uint32_t(v)
	}
	s := C.lt_pref_create(f.t, &p, C.uint64_t(workspace), &a[0])
	return uintptr(p), Status(s)
}

func (f *fnTable) prefDestroy(p uintptr) Status {
	return Status(C.lt_pref_destroy(f.t, C.uintptr_t(p)))
}

// heuristic returns up to want algorithms, best first.
func (f *fnTable) heuristic(h, desc, a, b, c, d, pref uintptr, want int) ([]Algo, Status) {
	res := make([]C.lt_heuristic, want)
	var got C.int
	s := C.lt_heuristic_query(f.t, C.uintptr_t(h), C.uintptr_t(desc), C.uintptr_t(a), C.uintptr_t(b),
		C.uintptr_t(c), C.uintptr_t(d), C.uintptr_t(pref), C.int(want), &res[0], &got)
	algos := make([]Algo, 0, int(got))
	for _, r := range res[:int(got)] {
		if r.state != 0 {
			continue
		}
		var a Algo
		for i := range a.data {
			a.data[i] = uint64(r.algo[i])
		}
		a.Workspace = int(r.workspaceSize)
		a.Waves = float32(r.wavesCount)
		algos = append(algos, a)
	}
	return algos, Status(s)
}

func (f *fnTable) matmul(h, desc uintptr, alpha float32, a, ad, b, bd uintptr, beta float32, c, cd, d, dd uintptr, algo *Algo, ws uintptr, wsSize int, stream uintptr) Status {
	var cal [8]C.uint64_t
	for i, v := range algo.data {
		cal[i] = C.uint64_t(v)
	}
	return Status(C.lt_matmul(f.t, C.uintptr_t(h), C.uintptr_t(desc), C.float(alpha), C.uintptr_t(a),
		C.uintptr_t(ad), C.uintptr_t(b), C.uintptr_t(bd), C.float(beta), C.uintptr_t(c), C.uintptr_t(cd),
		C.uintptr_t(d), C.uintptr_t(dd), &cal[0], C.uintptr_t(ws), C.size_t(wsSize), C.uintptr_t(stream)))
}
