package cuda

import (
	"bytes"
	"math"
	"testing"
)

func TestArgsPacking(t *testing.T) {
	var a Args
	a.U32(0x11223344).U64(0x0102030405060708).F32(1.5).I32(-2).F64(-0.25).Ptr(0xdeadbeef00).U32(7)
	wantOff := []int{0, 8, 16, 20, 24, 32, 40}
	if a.Len() != len(wantOff) {
		t.Fatalf("Len() = %d, want %d", a.Len(), len(wantOff))
	}
	for i, off := range wantOff {
		if a.offsets[i] != off {
			t.Errorf("argument %d at offset %d, want %d", i, a.offsets[i], off)
		}
	}
	want := []byte{
		0x44, 0x33, 0x22, 0x11, 0, 0, 0, 0, // U32 then padding to 8
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0, 0, 0xc0, 0x3f, // 1.5f
		0xfe, 0xff, 0xff, 0xff, // -2
	}
	want = append(want, le64(math.Float64bits(-0.25))...)
	want = append(want, le64(0xdeadbeef00)...)
	want = append(want, 7, 0, 0, 0)
	if !bytes.Equal(a.buf, want) {
		t.Errorf("packed\n% x\nwant\n% x", a.buf, want)
	}
	a.Reset()
	if a.Len() != 0 || len(a.buf) != 0 {
		t.Errorf("after Reset: Len %d, %d bytes", a.Len(), len(a.buf))
	}
}

func le64(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

func TestDim3Norm(t *testing.T) {
	if got := (Dim3{X: 5}).norm(); got != (Dim3{5, 1, 1}) {
		t.Errorf("norm = %v", got)
	}
	if got := (Dim3{2, 3, 4}).norm(); got != (Dim3{2, 3, 4}) {
		t.Errorf("norm = %v", got)
	}
}
