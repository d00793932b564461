package buffer_test

import (
	"fmt"
	"testing"

	"github.com/distopt/distopt/buffer"
)

// TestSliceSharesMemory writes through host slices of every range of a small
// buffer and checks the write lands at the same offset of the whole.
func TestSliceSharesMemory(t *testing.T) {
	const n = 6
	for lo := 0; lo <= n; lo++ {
		for hi := lo; hi <= n; hi++ {
			b := buffer.HostBuffer(make([]byte, n))
			s := b.Slice(lo, hi).(buffer.HostBuffer)
			if s.Len() != hi-lo || cap(s) != hi-lo {
				t.Fatalf("[%d:%d]: len %d cap %d", lo, hi, s.Len(), cap(s))
			}
			for i := range s {
				s[i] = byte(lo + i + 1)
			}
			for i, v := range b {
				want := byte(0)
				if lo <= i && i < hi {
					want = byte(i + 1)
				}
				if v != want {
					t.Fatalf("[%d:%d]: byte %d is %d, want %d", lo, hi, i, v, want)
				}
			}
		}
	}
}

// TestDeviceSlice checks device slices against the address arithmetic, and
// that every out of range slice panics naming the package.
func TestDeviceSlice(t *testing.T) {
	d := buffer.DeviceBuffer{Ptr: 1 << 20, Size: 5, Device: 3}
	for lo := -1; lo <= 6; lo++ {
		for hi := -1; hi <= 6; hi++ {
			ok := 0 <= lo && lo <= hi && hi <= d.Size
			got, msg := slice(d, lo, hi)
			if !ok {
				if msg == "" || msg[:8] != "buffer: " {
					t.Errorf("[%d:%d]: panic %q, want one prefixed buffer:", lo, hi, msg)
				}
				continue
			}
			want := buffer.DeviceBuffer{Ptr: d.Ptr + uintptr(lo), Size: hi - lo, Device: 3}
			if msg != "" || got != want {
				t.Errorf("[%d:%d]: %+v (panic %q), want %+v", lo, hi, got, msg, want)
			}
		}
	}
}

func slice(d buffer.DeviceBuffer, lo, hi int) (s buffer.Buffer, msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	return d.Slice(lo, hi), ""
}

// TestDTypeSize checks each element size against the width its name states.
func TestDTypeSize(t *testing.T) {
	for _, c := range []struct {
		dt   buffer.DType
		bits int
	}{{buffer.Uint8, 8}, {buffer.BFloat16, 16}, {buffer.Float32, 32}, {buffer.Float64, 64}, {buffer.Uint32, 32}, {buffer.Int64, 64}} {
		if got := 8 * c.dt.Size(); got != c.bits {
			t.Errorf("%s: %d bits, want %d", c.dt, got, c.bits)
		}
	}
}
