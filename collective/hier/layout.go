package hier

import (
	"fmt"
	"os"
	"strconv"
)

// Layout returns, for global rank rank of a world of d ranks in groups of
// g, the global ranks of its group and of its cross-group, each in the
// order of their ranks there: groups are runs of g consecutive ranks (rank
// r is rank r%g of group r/g, so that with g ranks per node a group is a
// node), and the cross-group of rank r holds rank r%g of every group.
func Layout(d, g, rank int) (group, cross []int, err error) {
	if g < 1 || d < 1 || d%g != 0 {
		return nil, nil, fmt.Errorf("hier: %d ranks do not form groups of %d: %w", d, g, ErrConfig)
	}
	if rank < 0 || rank >= d {
		return nil, nil, fmt.Errorf("hier: rank %d outside the world of %d ranks: %w", rank, d, ErrConfig)
	}
	k, i := rank/g, rank%g
	group = make([]int, g)
	for j := range group {
		group[j] = k*g + j
	}
	cross = make([]int, d/g)
	for j := range cross {
		cross[j] = j*g + i
	}
	return group, cross, nil
}

// EnvGroupSize is the environment variable that carries the group size of
// a job to its ranks: `distopt run --group-size G` sets it.
const EnvGroupSize = "DISTOPT_GROUP_SIZE"

// GroupSizeFromEnv returns the group size that EnvGroupSize sets for a
// world of d ranks: 0 when it is unset or empty (flat sharding), else a
// positive divisor of d. Anything else is an error wrapping ErrConfig that
// names the variable.
func GroupSizeFromEnv(d int) (int, error) {
	v := os.Getenv(EnvGroupSize)
	if v == "" {
		return 0, nil
	}
	g, err := strconv.Atoi(v)
	if err != nil || g < 1 || d%g != 0 {
		return 0, fmt.Errorf("hier: %s=%q: want a positive divisor of the world size %d: %w", EnvGroupSize, v, d, ErrConfig)
	}
	return g, nil
}
