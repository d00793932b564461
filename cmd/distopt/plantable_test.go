package main

import (
	"strings"
	"testing"

	"github.com/distopt/distopt/plan"
)

// TestComparisonTableMarks checks that exactly the cells above the limit
// are marked, against BytesPerParam.
func TestComparisonTableMarks(t *testing.T) {
	const n = 7_000_000_000
	ds := []int{1, 8, 64}
	limit := int64(80) << 30
	lines := strings.Split(strings.TrimSpace(comparisonTable(n, ds, limit)), "\n")
	if len(lines) != len(plan.Baselines)+1 {
		t.Fatalf("%d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, b := range plan.Baselines {
		f := strings.Fields(lines[i+1])
		cells := f[len(f)-len(ds):]
		for j, d := range ds {
			over := b.BytesPerParam(d)*n > float64(limit)
			if got := strings.HasSuffix(cells[j], "*"); got != over {
				t.Errorf("%s d=%d: cell %q, over the limit: %v", b.Name, d, cells[j], over)
			}
		}
	}
	if strings.Contains(comparisonTable(n, ds, 0), "*") {
		t.Error("a table without a limit marks cells")
	}
}
