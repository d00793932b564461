// Package barplot draws stacked bar charts and writes them as PNG or SVG.
//
// A chart has one bar per item. Each bar stacks one segment per series and
// shows its total above it. The legend sits in the top right corner, with
// room left for it above the tallest bar. Layout, fonts and file formats are
// those of gonum.org/v1/plot.
//
// It draws the planner's figures: the memory and step-time figures of
// examples/multigpu, and those of `distopt plan -chart` and
// -steptime-chart. SavePlot writes any gonum plot the same way. `distopt
// plan -chart` draws lines with it.
package barplot
