package inproc

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// chunkBytes is the size of one unit of work: the executor checks for an
// abort between chunks, and spreads chunks over worker goroutines when an
// operation has more than one.
const chunkBytes = 256 << 10

// task is one chunk of an operation; it touches bytes that no other task of
// the same operation touches.
type task func()

// execute runs the round's groups; it returns false if the world was
// aborted before it finished.
func (w *world) execute(rd *round) bool {
	if err := matchGroups(rd.ops); err != nil {
		rd.err = err
		return true
	}
	for i := range rd.ops[0] {
		ops := make([]collective.Op, w.n)
		for r := range ops {
			ops[r] = rd.ops[r][i]
		}
		tasks, bytes := plan(ops)
		if !w.runTasks(tasks, bytes >= 2*chunkBytes) {
			return false
		}
	}
	return true
}

// runTasks runs tasks, on several goroutines if parallel, and returns false
// if the world was aborted first. It returns only after every goroutine it
// started has finished.
func (w *world) runTasks(tasks []task, parallel bool) bool {
	aborted := func() bool {
		select {
		case <-w.abortc:
			return true
		default:
			return false
		}
	}
	workers := min(len(tasks), runtime.GOMAXPROCS(0))
	if !parallel || workers <= 1 {
		for _, t := range tasks {
			if aborted() {
				return false
			}
			t()
		}
		return true
	}
	var next atomic.Int64
	var stopped atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(tasks) {
					return
				}
				if aborted() {
					stopped.Store(true)
					return
				}
				tasks[i]()
			}
		})
	}
	wg.Wait()
	return !stopped.Load()
}

// matchGroups checks that every rank started the same ops.
func matchGroups(groups [][]collective.Op) error {
	g0 := groups[0]
	for r, g := range groups[1:] {
		if len(g) != len(g0) {
			return fmt.Errorf("%w: rank 0 started %d ops, rank %d %d", errMismatch, len(g0), r+1, len(g))
		}
		for i, op := range g {
			a := g0[i]
			same := op.Kind == a.Kind
			switch op.Kind {
			case collective.OpAllGather, collective.OpAllToAll:
				same = same && op.Src.Len() == a.Src.Len()
			case collective.OpReduceScatter, collective.OpAllReduce:
				same = same && op.Src.Len() == a.Src.Len() && op.DType == a.DType && op.Reduce == a.Reduce
			case collective.OpBroadcast:
				same = same && op.Dst.Len() == a.Dst.Len() && op.Root == a.Root
			}
			if !same {
				return fmt.Errorf("%w: op %d: rank 0 started %s, rank %d %s", errMismatch, i, describe(a), r+1, describe(op))
			}
		}
	}
	return nil
}

func describe(op collective.Op) string {
	switch op.Kind {
	case collective.OpAllGather, collective.OpAllToAll:
		return fmt.Sprintf("%s of %d bytes", op.Kind, op.Src.Len())
	case collective.OpReduceScatter, collective.OpAllReduce:
		return fmt.Sprintf("%s %s of %d bytes of %s", op.Kind, op.Reduce, op.Src.Len(), op.DType)
	case collective.OpBroadcast:
		return fmt.Sprintf("%s of %d bytes from rank %d", op.Kind, op.Dst.Len(), op.Root)
	}
	return op.Kind.String()
}

// plan splits one operation (ops[r] is rank r's) into tasks; bytes is the
// number of bytes they read.
func plan(ops []collective.Op) (tasks []task, bytes int) {
	n := len(ops)
	dst := make([][]byte, n)
	src := make([][]byte, n)
	for r, op := range ops {
		if op.Dst != nil {
			dst[r] = op.Dst.(buffer.HostBuffer)
		}
		if op.Src != nil {
			src[r] = op.Src.(buffer.HostBuffer)
		}
	}
	switch ops[0].Kind {
	case collective.OpAllGather:
		m := len(src[0])
		bytes = n * n * m
		for r := range n {
			for s := range n {
				to := dst[r][s*m : (s+1)*m]
				if !sameBytes(to, src[s]) {
					tasks = appendCopies(tasks, to, src[s])
				}
			}
		}
	case collective.OpAllToAll:
		m := len(src[0]) / n
		bytes = n * len(src[0])
		for r := range n {
			for s := range n {
				tasks = appendCopies(tasks, dst[r][s*m:(s+1)*m], src[s][r*m:(r+1)*m])
			}
		}
	case collective.OpBroadcast:
		root := ops[0].Root
		bytes = (n - 1) * len(dst[root])
		for r := range n {
			if r != root {
				tasks = appendCopies(tasks, dst[r], dst[root])
			}
		}
	case collective.OpReduceScatter:
		dt, red := ops[0].DType, ops[0].Reduce
		m := len(dst[0])
		bytes = n * len(src[0])
		for r := range n {
			for lo, hi := range chunks(m, dt.Size()) {
				tasks = append(tasks, func() {
					srcs := make([][]byte, n)
					for s := range n {
						srcs[s] = src[s][r*m+lo : r*m+hi]
					}
					collective.Reduce(dst[r][lo:hi], srcs, dt, red)
				})
			}
		}
	case collective.OpAllReduce:
		dt, red := ops[0].DType, ops[0].Reduce
		bytes = 2 * n * len(src[0])
		for lo, hi := range chunks(len(dst[0]), dt.Size()) {
			tasks = append(tasks, func() {
				srcs := make([][]byte, n)
				for s := range n {
					srcs[s] = src[s][lo:hi]
				}
				out := dst[0][lo:hi]
				// Every source chunk is read before any destination
				// chunk is written, so Dst may be Src on any rank.
				collective.Reduce(out, srcs, dt, red)
				for r := 1; r < n; r++ {
					copy(dst[r][lo:hi], out)
				}
			})
		}
	}
	return tasks, bytes
}

// appendCopies appends the copy of src to dst, chunk by chunk.
func appendCopies(tasks []task, dst, src []byte) []task {
	for lo, hi := range chunks(len(src), 1) {
		tasks = append(tasks, func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	return tasks
}

// chunks yields the ranges [lo, hi) that cut n bytes into chunks of about
// chunkBytes, each a multiple of size.
func chunks(n, size int) func(yield func(lo, hi int) bool) {
	step := max(chunkBytes/size*size, size)
	return func(yield func(lo, hi int) bool) {
		for lo := 0; lo < n; lo += step {
			if !yield(lo, min(lo+step, n)) {
				return
			}
		}
	}
}

// sameBytes reports whether a and b are the same memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}
