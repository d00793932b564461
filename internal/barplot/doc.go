// Package barplot draws stacked bar charts with gonum.org/v1/plot and
// writes them as PNG or SVG: one bar per item, each a stack of one segment
// per series, its total written above it, the legend in the top right
// corner with room left for it above the tallest bar.
//
// It is the one place where distopt's tools turn numbers into bar charts
// (examples/multigpu's memory and step-time figures); layout, fonts and
// file formats are gonum/plot's. SavePlot writes any gonum plot the same
// way (`distopt plan -chart` draws lines with it).
package barplot
