package plan

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestForCount sweeps counts over twelve orders of magnitude: the model of
// each holds exactly the count (summed from its tensors, not from
// ForCount's closed form), validates, and from 1B on spreads it over many
// tensors, none above a tenth of the count, as a real model does.
func TestForCount(t *testing.T) {
	counts := []int64{1, 1000, 1000003, 8_000_000, 8_400_000, 8_500_000, 123_456_789, 350e6, 1.3e9, 7e9, 70e9, 70_553_706_496, 405e9, 1e12}
	for e := 6.0; e <= 12; e += 0.25 {
		counts = append(counts, int64(math.Pow(10, e))+7)
	}
	for _, n := range counts {
		m := ForCount(n)
		require.NoError(t, m.Validate(), "n=%d", n)
		ps := m.Params()
		require.Equal(t, n, NumParams(ps), "n=%d: %s", n, m.Describe())
		require.Equal(t, n, m.NumParams(), "n=%d", n)
		s, sized := m.(SizedModel)
		if !sized {
			assert.Less(t, n, int64(8_500_000), "n=%d: a flat tensor", n)
			continue
		}
		assert.Less(t, s.Rest, 2*s.Llama.Hidden, "n=%d", n)
		assert.Equal(t, llamaCount(s.Llama), NumParams(s.Llama.Params()), "n=%d: closed form", n)
		if n >= 1e9 {
			assert.Greater(t, len(ps), 100, "n=%d: tensors", n)
			for _, p := range ps {
				k := int64(1)
				for _, d := range p.Shape {
					k *= int64(d)
				}
				assert.LessOrEqual(t, k, n/10, "n=%d: %s", n, p.Name)
			}
		}
	}
}
