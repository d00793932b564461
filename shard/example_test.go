package shard_test

import (
	"fmt"

	"github.com/distopt/distopt/shard"
)

// A matrix of 300 elements and a bias of 7 over 4 ranks: the FP8 bucket is
// padded to a multiple of 4 x 128 elements, the high-precision one to a
// multiple of 4 x 16; rank 2's shard ends the matrix, rank 3's is padding.
func Example() {
	l, err := shard.New([]shard.Param{
		{Name: "w", Shape: []int{20, 15}},
		{Name: "b", Shape: []int{7}, HighPrecision: true},
	}, 4, shard.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, b := range l.Buckets {
		fmt.Printf("bucket %d: high precision %t, %d used, %d with padding, %d per rank\n", i, b.HighPrecision, b.Used, b.Size, b.ShardSize)
	}
	for r := range 4 {
		fmt.Printf("rank %d of bucket 0: %+v\n", r, l.Pieces(0, r))
	}
	// Output:
	// bucket 0: high precision false, 300 used, 512 with padding, 128 per rank
	// bucket 1: high precision true, 7 used, 64 with padding, 16 per rank
	// rank 0 of bucket 0: [{Param:0 ParamOffset:0 BucketOffset:0 ShardOffset:0 Len:128}]
	// rank 1 of bucket 0: [{Param:0 ParamOffset:128 BucketOffset:128 ShardOffset:0 Len:128}]
	// rank 2 of bucket 0: [{Param:0 ParamOffset:256 BucketOffset:256 ShardOffset:0 Len:44}]
	// rank 3 of bucket 0: []
}

// Element counts are checked: a shape whose product overflows an int (or
// passes MaxElements) is an error, not a parameter of a wrapped size.
func ExampleParam_Elements() {
	for _, shape := range [][]int{{4096, 4096}, {1 << 32, 1 << 32}} {
		n, err := shard.Param{Name: "w", Shape: shape}.Elements()
		fmt.Println(n, err)
	}
	// Output:
	// 16777216 <nil>
	// 0 shard: parameter "w" has shape [4294967296 4294967296]: more than 70368744177664 elements (MaxElements): shard: invalid layout request
}
