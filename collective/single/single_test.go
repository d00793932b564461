package single

import (
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
)

func TestConformance(t *testing.T) {
	collectivetest.Run(t, func(t *testing.T, n int) []collective.Communicator {
		return []collective.Communicator{New(buffer.Host, nil)}
	}, collectivetest.Options{Sizes: []int{1}})
}
