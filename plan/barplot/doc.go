// Package barplot draws stacked bar charts with gonum.org/v1/plot and
// writes them as PNG or SVG: one bar per item, each a stack of one segment
// per series, its total written above it, the legend in the top right
// corner with room left for it above the tallest bar.
//
// It draws the planner's figures: memory per rank and the phases of a step
// (examples/multigpu, `distopt plan -chart` and `-steptime-chart`);
// layout, fonts and file formats are gonum/plot's. SavePlot writes any
// gonum plot the same way (`distopt plan -chart` draws lines with it).
package barplot
