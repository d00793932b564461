package nccl_test

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/internal/nccl"
)

// Example opens the system's NCCL (or $NCCL_LIBRARY) and reports its
// version; on a host without NCCL it says so, as a caller falling back to
// another backend would.
func Example() {
	lib, err := nccl.Default()
	switch {
	case errors.Is(err, nccl.ErrNoLibrary):
		fmt.Println("no NCCL here")
		return
	case errors.Is(err, nccl.ErrTooOld):
		fmt.Println(err)
		return
	case err != nil:
		fmt.Println(err)
		return
	}
	fmt.Println("NCCL", lib.Version())
}

// ExampleVersionFromCode decodes ncclGetVersion's integer.
func ExampleVersionFromCode() {
	fmt.Println(nccl.VersionFromCode(22803), nccl.VersionFromCode(2804))
	// Output: 2.28.3 2.8.4
}
