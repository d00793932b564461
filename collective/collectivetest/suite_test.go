package collectivetest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/inproc"
)

// faulty wraps a correct communicator and breaks one rule, so that the
// suite can be seen to catch it.
type faulty struct {
	collective.Communicator
	start func(c collective.Communicator, ops []collective.Op) collective.Work
}

func (f faulty) Start(ops ...collective.Op) collective.Work { return f.start(f.Communicator, ops) }

// workFunc adapts a function to collective.Work.
type workFunc func(ctx context.Context) error

func (w workFunc) Wait(ctx context.Context) error { return w(ctx) }

// ExampleRunRank runs the suite from every rank's view, as the ranks of a
// multi-process backend would, each in its own process.
func ExampleRunRank() {
	comms := inproc.Communicators(2)
	opts := collectivetest.Options{LargeBytes: 16 << 10}
	var wg sync.WaitGroup
	errs := make([]error, len(comms))
	for r, c := range comms {
		wg.Go(func() { errs[r] = collectivetest.RunRank(context.Background(), c, 42, opts) })
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	fmt.Println(errors.Join(errs...))
	// Output: <nil>
}

func TestSuiteCatchesFaults(t *testing.T) {
	tests := []struct {
		name  string
		start func(c collective.Communicator, ops []collective.Op) collective.Work
		want  string
	}{
		{"wrong result", func(c collective.Communicator, ops []collective.Op) collective.Work {
			w := c.Start(ops...)
			return workFunc(func(ctx context.Context) error {
				err := w.Wait(ctx)
				for _, op := range ops {
					if b, ok := op.Dst.(buffer.HostBuffer); ok && op.Kind == collective.OpAllReduce && len(b) > 0 {
						b[len(b)-1] ^= 1
					}
				}
				return err
			})
		}, "differ"},
		{"invalid accepted", func(c collective.Communicator, ops []collective.Op) collective.Work {
			for _, op := range ops {
				if op.Validate(c.Size(), c.Memory()) != nil {
					return collective.DoneWork{}
				}
			}
			return c.Start(ops...)
		}, "want collective: invalid operation"},
		{"input modified", func(c collective.Communicator, ops []collective.Op) collective.Work {
			w := c.Start(ops...)
			return workFunc(func(ctx context.Context) error {
				err := w.Wait(ctx)
				for _, op := range ops {
					if b, ok := op.Src.(buffer.HostBuffer); ok && op.Kind == collective.OpReduceScatter && len(b) > 0 {
						b[0] ^= 1
					}
				}
				return err
			})
		}, "modified"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			comms := inproc.Communicators(2)
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := make([]error, len(comms))
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Go(func() {
					errs[r] = collectivetest.RunRank(ctx, faulty{c, tc.start}, 1, collectivetest.Options{LargeBytes: 16 << 10})
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("rank %d: got %v, want an error containing %q", r, err, tc.want)
				}
			}
		})
	}
}
