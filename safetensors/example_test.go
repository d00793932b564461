package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/distopt/distopt/safetensors"
)

// Write a file of one float32 matrix with metadata, then read its header
// back and find the tensor's bytes.
func Example() {
	specs := []safetensors.Spec{{Name: "w", DType: safetensors.F32, Shape: []int{2, 2}}}
	_, head, err := safetensors.Encode(specs, map[string]string{"step": "10"})
	if err != nil {
		panic(err)
	}
	file := head
	for _, v := range []float32{1, 2, 3, 4} {
		file = binary.LittleEndian.AppendUint32(file, math.Float32bits(v))
	}

	h, _, err := safetensors.Read(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		panic(err)
	}
	t, _ := h.Lookup("w")
	data := file[h.DataOffset+t.Begin : h.DataOffset+t.End]
	fmt.Println(t.DType, t.Shape, t.NumElements(), h.Metadata["step"])
	fmt.Println(math.Float32frombits(binary.LittleEndian.Uint32(data[12:])))
	// Output:
	// F32 [2 2] 4 10
	// 4
}
