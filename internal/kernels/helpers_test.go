package kernels

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"unsafe"

	pcuda "github.com/distopt/distopt/cuda"
	pcudatest "github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/cudalink"
)

// loadAll opens GPU 0 (or skips, see cudatest) and loads every variant the
// device supports (those DISTOPT_TEST_VARIANTS lists, comma-separated,
// when set), unloading them when the test ends.
func loadAll(t testing.TB) (*cuda.Device, []*Set) {
	t.Helper()
	d := cudatest.Require(t)
	return d, loadVariants(t, d, func(v Variant) (*Set, error) { return LoadVariant(d, v) })
}

// loadVariants is cudatest.LoadVariants on this package's handles.
func loadVariants(t testing.TB, d *cuda.Device, load func(Variant) (*Set, error)) []*Set {
	t.Helper()
	return pcudatest.LoadVariants(t, cudalink.PublicDevice(d), func(v pcuda.Variant) (*Set, error) { return load(Variant(v)) })
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// parallelFor calls f on contiguous pieces [lo, hi) of [0, n) from one
// goroutine per CPU.
func parallelFor(n int, f func(lo, hi int)) {
	p := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for k := range p {
		lo, hi := n*k/p, n*(k+1)/p
		if lo < hi {
			wg.Go(func() { f(lo, hi) })
		}
	}
	wg.Wait()
}

// class names the kind of float32 an input is, for mismatch reports.
func class(bits uint32) string {
	sign := "+"
	if bits>>31 != 0 {
		sign = "-"
	}
	a := bits & 0x7fffffff
	x := math.Float32frombits(a)
	switch {
	case a > 0x7f800000:
		return sign + "NaN"
	case a == 0x7f800000:
		return sign + "Inf"
	case a == 0:
		return sign + "0"
	case a < 0x00800000:
		return sign + "f32-subnormal"
	case x > 57344:
		return sign + "above-57344"
	case x > 448:
		return sign + "448..57344"
	case x < 0x1p-6:
		return sign + "below-2^-6"
	}
	return sign + "normal"
}

// mismatchLog collects the differences of one output against its reference:
// a count per input class and the first few examples of each class.
type mismatchLog struct {
	mu       sync.Mutex
	total    int
	byClass  map[string]int
	examples map[string][]string
}

func (m *mismatchLog) add(bits uint32, got, want uint64, width int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byClass == nil {
		m.byClass, m.examples = map[string]int{}, map[string][]string{}
	}
	c := class(bits)
	m.total++
	m.byClass[c]++
	if len(m.examples[c]) < 4 {
		m.examples[c] = append(m.examples[c], fmt.Sprintf("in %#08x: gpu %#0*x, cpu %#0*x", bits, width, got, width, want))
	}
}

func (m *mismatchLog) String() string {
	if m.total == 0 {
		return "no mismatch"
	}
	classes := make([]string, 0, len(m.byClass))
	for c := range m.byClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	var b strings.Builder
	fmt.Fprintf(&b, "%d mismatches", m.total)
	for _, c := range classes {
		fmt.Fprintf(&b, "\n  %-16s %10d  e.g. %s", c, m.byClass[c], strings.Join(m.examples[c], "; "))
	}
	return b.String()
}

// compareChunk compares got with want, element i standing for input bits
// base+i, in parallel; equal 64 KiB blocks are skipped wholesale.
func compareChunk[T uint8 | uint16 | uint32](m *mismatchLog, got, want []T, base uint32) {
	const block = 1 << 16
	var zero T
	width := 2 * int(unsafe.Sizeof(zero))
	parallelFor((len(want)+block-1)/block, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			i0, i1 := b*block, min((b+1)*block, len(want))
			if equal(got[i0:i1], want[i0:i1]) {
				continue
			}
			for i := i0; i < i1; i++ {
				if got[i] != want[i] {
					m.add(base+uint32(i), uint64(got[i]), uint64(want[i]), width)
				}
			}
		}
	})
}

func equal[T uint8 | uint16 | uint32](a, b []T) bool {
	return bytes.Equal(cuda.Bytes(a), cuda.Bytes(b))
}
