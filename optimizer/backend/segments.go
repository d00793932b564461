package backend

import "fmt"

// CheckSegments returns an error naming the first way in which segs is not
// a segment table the backends accept for a shard of n elements, or nil.
// The kernels rely on tables whose segments are
// non-empty, inside [0, n), sorted by offset and non-overlapping, of a known
// Mode, with a slot where the mode has one, and (ModeBlock) starting at a
// multiple of block, (ModeTile) with a positive column count. The optimizer
// checks every table it builds when checks are on (see package
// internal/invariants); the conformance suite (optimizer/backendtest)
// checks the tables it draws.
func CheckSegments(segs []Segment, n, block int) error {
	end := 0
	for i, s := range segs {
		bad := func(why string, args ...any) error {
			return fmt.Errorf("backend: segment %d (offset %d, length %d, mode %d) of a %d-element shard: %s", i, s.Off, s.Len, s.Mode, n, fmt.Sprintf(why, args...))
		}
		switch {
		case s.Len <= 0:
			return bad("empty")
		case s.Off < end:
			return bad("starts before the end %d of the segment before it", end)
		case s.Off+s.Len > n:
			return bad("ends past the shard")
		case s.Mode < ModeHighPrecision || s.Mode > ModeTile:
			return bad("unknown mode")
		case s.Mode != ModeHighPrecision && s.Mode != ModeBlock && s.Slot < 0:
			return bad("no slot")
		case s.Mode == ModeBlock && (block <= 0 || s.Off%block != 0):
			return bad("not at a multiple of the block of %d elements", block)
		case s.Mode == ModeTile && (s.Cols <= 0 || s.ParamOffset < 0):
			return bad("tile placement: %d columns, parameter offset %d", s.Cols, s.ParamOffset)
		}
		end = s.Off + s.Len
	}
	return nil
}
