package single_test

import (
	"context"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/single"
)

// With one rank, an all-reduce leaves the buffer as it is and an all-gather
// copies the rank's part.
func Example() {
	c := single.New(buffer.Host, nil)
	defer c.Close()
	ctx := context.Background()
	g := collective.ToBytes([]float32{1.5, -2})
	if err := collective.AllReduce(ctx, c, g, g, buffer.Float32, collective.Avg); err != nil {
		fmt.Println(err)
	}
	dst := make(buffer.HostBuffer, 3)
	if err := collective.AllGather(ctx, c, dst, buffer.HostBuffer{7, 8, 9}); err != nil {
		fmt.Println(err)
	}
	fmt.Println(collective.FromBytes[float32](g), []byte(dst), c.Size())
	// Output: [1.5 -2] [7 8 9] 1
}
