package cuda_test

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/cuda"
)

// Open a GPU, copy bytes there and back, or learn that there is none.
func Example() {
	d, err := cuda.Open(0)
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		fmt.Println("no GPU:", err)
		return
	}
	if err != nil {
		panic(err)
	}
	defer d.Close()
	s, err := d.NewStream()
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	p, err := d.Alloc(4)
	if err != nil {
		panic(err)
	}
	defer d.Free(p)
	back := make([]byte, 4)
	if err := s.Upload(p, []byte("FP8!")); err == nil {
		err = s.Download(back, p)
	}
	fmt.Println(d.Info().Name, string(back), err)
}
