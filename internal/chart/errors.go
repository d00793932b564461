package chart

import "errors"

var (
	// ErrEmpty is returned for a chart with no bars or no series.
	ErrEmpty = errors.New("chart: nothing to draw")
	// ErrValue is returned for a value that cannot be drawn: negative, NaN
	// or infinite, or a bar whose number of values differs from the number
	// of series.
	ErrValue = errors.New("chart: invalid value")
	// ErrSize is returned when the image is too small for the chart's
	// frame (axis labels, legend, title).
	ErrSize = errors.New("chart: image too small")
)
