package safetensors

import "errors"

var (
	// ErrFormat marks a file or header that breaks the format: a bad
	// length prefix, malformed JSON, an unknown dtype, a shape that does not
	// match its byte range, ranges that overlap or leave holes, duplicate
	// names, or bytes past the end of the data section.
	ErrFormat = errors.New("safetensors: malformed file")
	// ErrTruncated marks a file shorter than its header (or length prefix)
	// says it is.
	ErrTruncated = errors.New("safetensors: file truncated")
)
