//go:build cgo && linux

package dl_test

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/internal/dl"
)

func Example() {
	lib, err := dl.Open("libc.so.6", dl.Now|dl.Local)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lib.Close()
	p, err := lib.Lookup("strlen")
	fmt.Println(p != nil, err)

	_, err = lib.Lookup("no_such_function")
	fmt.Println(errors.Is(err, dl.ErrSymbol))
	// Output:
	// true <nil>
	// true
}
