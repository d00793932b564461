package main

import (
	"io"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanChartStyle checks that no line of the chart hides another: the
// two 16-byte baselines (4 + 4 + 8 and 2 + 2 + 12) are equal at every d,
// so the second is marked as the first, and lines apart by more than 1%
// of the chart somewhere are not marked; and that the value axis ends
// within 5% above the highest point, leaving out a GPU far above it.
func TestPlanChartStyle(t *testing.T) {
	o, err := parsePlan([]string{"-model", "llama-3-8b", "-d", "1,2,8,64"}, io.Discard)
	require.NoError(t, err)
	p, err := makePlan(o)
	require.NoError(t, err)
	lines := p.chartLines()
	same := sameAs(lines)
	top := 0.0
	for _, l := range lines {
		top = max(top, slices.Max(l.gib))
	}
	for j := range lines {
		for i := range j {
			equal, apart := true, false
			for k := range p.ds {
				equal = equal && lines[i].gib[k] == lines[j].gib[k]
				apart = apart || math.Abs(lines[i].gib[k]-lines[j].gib[k]) > 0.01*top
			}
			if equal {
				assert.GreaterOrEqual(t, same[j], 0, "%q equals %q: not marked", lines[j].name, lines[i].name)
			}
			if apart {
				assert.NotEqual(t, i, same[j], "%q marked the same as %q", lines[j].name, lines[i].name)
			}
		}
	}
	assert.Equal(t, 0, same[1], "BF16 + FP32 master clone is FP32 Adam's line")
	assert.InDelta(t, 1.05*top, chartTop(lines, 0), 1e-9)
	assert.InDelta(t, 1.05*top, chartTop(lines, 10*top), 1e-9, "a GPU far above is left out")
	assert.InDelta(t, 1.05*1.2*top, chartTop(lines, 1.2*top), 1e-9, "a GPU just above is drawn")
}
