package fp8grad

import (
	"fmt"

	"github.com/distopt/distopt/collective"
)

// resKey names the error feedback residual of a reduce-scatter: the op's
// Tag when it has one (the optimizer tags each bucket's gradient
// reduce-scatter), else its source buffer (address and length in bytes).
type resKey struct {
	tag  uint64
	addr uintptr
	size int
}

// keyOf returns the residual key of op, whose source starts at addr and
// holds size bytes.
func keyOf(op collective.Op, addr uintptr, size int) resKey {
	if op.Tag != 0 {
		return resKey{tag: op.Tag}
	}
	return resKey{addr: addr, size: size}
}

// checkLen refuses a residual of have elements for a source of want: one
// tag used for reduce-scatters of different sizes.
func (k resKey) checkLen(have, want int) error {
	if have == want {
		return nil
	}
	return fmt.Errorf("fp8grad: reduce-scatter tag %d with a source of %d elements, earlier of %d (one tag, one reduction): %w", k.tag, want, have, collective.ErrInvalid)
}

// residual returns the host residual of k (n elements, zero on first
// use), nil without error feedback.
func (c *Comm) residual(k resKey, n int) ([]float32, error) {
	if !c.cfg.ErrorFeedback || n == 0 {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.residuals[k]
	if !ok {
		r = make([]float32, n)
		c.residuals[k] = r
	}
	return r, k.checkLen(len(r), n)
}
