package main

import (
	"fmt"
	"strings"

	"github.com/distopt/distopt/plan"
)

// nameWidth is the width of the configuration column of comparisonTable.
const nameWidth = 42

// comparisonTable formats, for a model of n parameters and each d in ds,
// the per-rank GiB of every baseline. With limit > 0, a cell above limit
// bytes is marked with a trailing "*".
func comparisonTable(n int64, ds []int, limit int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s %-14s", nameWidth, "configuration (GiB per rank)", "bytes/param")
	for _, d := range ds {
		fmt.Fprintf(&b, " %9s", fmt.Sprintf("d=%d", d))
	}
	b.WriteString("\n")
	for _, bl := range plan.Baselines {
		fmt.Fprintf(&b, "%-*s %-14s", nameWidth, bl.Name, bl.Formula())
		for _, d := range ds {
			bytes := bl.BytesPerParam(d) * float64(n)
			b.WriteString(" " + gibCell(bytes, limit))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// gibCell formats bytes as GiB in a column of width 9, marked "*" when limit
// is positive and bytes exceed it.
func gibCell(bytes float64, limit int64) string {
	mark := " "
	if limit > 0 && bytes > float64(limit) {
		mark = "*"
	}
	return fmt.Sprintf("%8.2f%s", bytes/(1<<30), mark)
}

// rowFormat is the format of a row name and its formula in
// comparisonTable, for the rows the plan command adds.
func rowFormat() string { return fmt.Sprintf("%%-%ds %%-14s", nameWidth) }
