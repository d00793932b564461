package hier

import (
	"fmt"

	"github.com/distopt/distopt/collective/inproc"
)

// InProcess returns the d ranks of an in-process hierarchical world of
// d/g groups of g ranks, indexed by global rank: rank r is rank r%g of
// group r/g (groups are runs of consecutive ranks, as nodes are). Each
// group is an in-process world of g ranks and each set of ranks of equal
// index in their groups one of d/g ranks.
func InProcess(d, g int) ([]*Comm, error) {
	if g < 1 || d < 1 || d%g != 0 {
		return nil, fmt.Errorf("hier: %d ranks do not form groups of %d: %w", d, g, ErrConfig)
	}
	n := d / g
	groups := make([][]*inproc.Comm, n)
	for k := range groups {
		groups[k] = inproc.New(g)
	}
	crosses := make([][]*inproc.Comm, g)
	for i := range crosses {
		crosses[i] = inproc.New(n)
	}
	comms := make([]*Comm, d)
	for r := range comms {
		k, i := r/g, r%g
		c, err := New(groups[k][i], crosses[i][k])
		if err != nil {
			return nil, err
		}
		comms[r] = c
	}
	return comms, nil
}
