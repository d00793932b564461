// Package chart draws the PNG charts of distopt's examples and benchmark
// scripts with the standard library alone: stacked vertical bar charts (a
// plain bar chart is a stack of one series) with a title, a value axis with
// round ticks, wrapped bar labels, a legend and each bar's total above it.
//
// Text is drawn with a small bitmap font of the package's own (5x7 pixel
// glyphs with two rows of descenders, printable ASCII only; any other rune
// is drawn as '?'), scaled by whole pixels. It keeps the module free of a
// font dependency and the output identical on every machine.
//
// Rendering is deterministic: the same Bars give the same bytes of PNG.
package chart
