package fp8

import "errors"

var (
	// ErrRecipe reports an invalid Recipe; the wrapping error names the
	// field.
	ErrRecipe = errors.New("fp8: invalid recipe")
	// ErrShape reports a shape that does not match the data, or a negative
	// dimension.
	ErrShape = errors.New("fp8: shape mismatch")
	// ErrHistory reports a missing AmaxHistory for delayed scaling.
	ErrHistory = errors.New("fp8: delayed scaling needs an amax history")
)
