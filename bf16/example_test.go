package bf16_test

import (
	"fmt"

	"github.com/distopt/distopt/bf16"
)

func ExampleFromFloat32() {
	h := bf16.FromFloat32(1.00390625) // a tie between 1 and 1.0078125
	fmt.Printf("%#04x %v %v\n", h, bf16.ToFloat32(h), bf16.Round(1.00390625))
	// Output: 0x3f80 1 1
}
