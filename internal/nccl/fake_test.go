//go:build cgo && linux

package nccl

import (
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// buildFake compiles testdata/fakenccl.c into a shared library with the
// given version code and extra flags, or skips the test without a C
// compiler.
func buildFake(t *testing.T, version string, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		if cc, err = exec.LookPath("gcc"); err != nil {
			t.Skip("no C compiler to build the fake NCCL")
		}
	}
	out := filepath.Join(t.TempDir(), "libfakenccl.so")
	args := append([]string{"-shared", "-fPIC", "-O1", "-DFAKE_VERSION=" + version, "-o", out}, flags...)
	args = append(args, filepath.Join("testdata", "fakenccl.c"))
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building the fake NCCL: %v\n%s", err, b)
	}
	return out
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		path    func(t *testing.T) string
		want    error
		message string
	}{
		{"missing", func(*testing.T) string { return "/nonexistent/libnccl.so.2" }, ErrNoLibrary, "/nonexistent/libnccl.so.2"},
		{"too old", func(t *testing.T) string { return buildFake(t, "21706") }, ErrTooOld, "NCCL 2.17.6, distopt needs 2.18.0"},
		{"old encoding", func(t *testing.T) string { return buildFake(t, "2804") }, ErrTooOld, "NCCL 2.8.4"},
		{"missing symbol", func(t *testing.T) string { return buildFake(t, "22803", "-DOMIT_BROADCAST") }, ErrNoLibrary, "lacks ncclBroadcast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib, err := Open(tt.path(t))
			if !errors.Is(err, tt.want) || lib != nil {
				t.Fatalf("Open = %v, %v; want an error matching %v", lib, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q does not say %q", err, tt.message)
			}
		})
	}
}

func TestFakeLibrary(t *testing.T) {
	path := buildFake(t, "22803")
	lib, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if lib.Version() != (Version{2, 28, 3}) || lib.Path() != path {
		t.Errorf("Version, Path = %v, %q", lib.Version(), lib.Path())
	}
	if got := lib.ErrorString(RemoteError); got != "remote" {
		t.Errorf("ErrorString(RemoteError) = %q", got)
	}
	id, err := lib.UniqueID()
	if err != nil {
		t.Fatalf("UniqueID: %v", err)
	}
	for i, b := range id {
		if b != byte(i^0x5a) {
			t.Fatalf("UniqueID byte %d = %#x, want %#x", i, b, i^0x5a)
		}
	}

	t.Run("blocking", func(t *testing.T) {
		c, err := lib.InitRank(4, id, 3, Config{Blocking: true, MaxCTAs: 7, NetName: "Socket"})
		if err != nil {
			t.Fatalf("InitRank: %v", err)
		}
		defer c.Destroy()
		checkQuery(t, "Count", c.Count, 4)
		checkQuery(t, "UserRank", c.UserRank, 3)
		checkQuery(t, "CuDevice (config fields)", c.CuDevice, 2+10*7)
		if err := c.AsyncError(); err != nil {
			t.Errorf("AsyncError = %v", err)
		}
	})

	t.Run("non-blocking", func(t *testing.T) {
		c, err := lib.InitRank(2, id, 0, Config{})
		if !errors.Is(err, ErrInProgress) || c == nil {
			t.Fatalf("InitRank = %v, %v; want a Comm and ErrInProgress", c, err)
		}
		defer c.Abort()
		polls := 0
		for ; errors.Is(c.AsyncError(), ErrInProgress); polls++ {
		}
		if polls != 2 {
			t.Errorf("in progress for %d polls, want 2", polls)
		}
		checkQuery(t, "CuDevice (config fields)", c.CuDevice, 3)
	})

	t.Run("bad id", func(t *testing.T) {
		bad := id
		bad[77] ^= 1
		c, err := lib.InitRank(2, bad, 1, Config{Blocking: true})
		var e *Error
		if c != nil || !errors.As(err, &e) || e.Code != InvalidArgument || e.Detail != "fake: unique id mangled" {
			t.Fatalf("InitRank with a mangled id = %v, %v", c, err)
		}
	})

	t.Run("collectives", func(t *testing.T) {
		c, err := lib.InitRank(2, id, 1, Config{Blocking: true})
		if err != nil {
			t.Fatalf("InitRank: %v", err)
		}
		defer c.Destroy()
		rec := make([]uint64, 9)
		recv := uintptr(unsafe.Pointer(&rec[0]))
		const send, stream = 0x1000, 0xbeef
		tests := []struct {
			name string
			call func() error
			want []uint64 // kind, send, recv, count, dt, op, root, rank, stream
		}{
			{"all-gather", func() error { return c.AllGather(send, recv, 1<<33, Uint8, stream) },
				[]uint64{1, send, uint64(recv), 1 << 33, 1, ^uint64(0), ^uint64(0), 1, stream}},
			{"reduce-scatter", func() error { return c.ReduceScatter(send, recv, 5, BFloat16, Avg, stream) },
				[]uint64{2, send, uint64(recv), 5, 9, 4, ^uint64(0), 1, stream}},
			{"all-reduce", func() error { return c.AllReduce(send, recv, 7, Uint32, Max, stream) },
				[]uint64{3, send, uint64(recv), 7, 3, 2, ^uint64(0), 1, stream}},
			{"broadcast", func() error { return c.Broadcast(send, recv, 9, Int64, 1, stream) },
				[]uint64{4, send, uint64(recv), 9, 4, ^uint64(0), 1, 1, stream}},
			{"send", func() error { return c.Send(recv, 11, Uint8, 0, stream) },
				[]uint64{5, uint64(recv), uint64(recv), 11, 1, ^uint64(0), 0, 1, stream}},
			{"recv", func() error { return c.Recv(recv, 12, Float32, 0, stream) },
				[]uint64{6, uint64(recv), uint64(recv), 12, 7, ^uint64(0), 0, 1, stream}},
		}
		for _, tt := range tests {
			clear(rec)
			if err := lib.GroupStart(); err != nil {
				t.Fatalf("GroupStart: %v", err)
			}
			err := tt.call()
			if err2 := lib.GroupEnd(); err2 != nil {
				t.Fatalf("GroupEnd: %v", err2)
			}
			runtime.KeepAlive(rec)
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
				continue
			}
			for i := range rec {
				if rec[i] != tt.want[i] {
					t.Errorf("%s: argument record %v, want %v", tt.name, rec, tt.want)
					break
				}
			}
		}
		err = c.AllReduce(send, recv, 13, Float32, Sum, stream)
		if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "ncclAllReduce: ncclRemoteError (6): remote: fake: peer vanished") {
			t.Errorf("failing all-reduce: %v", err)
		}
	})
}

func checkQuery(t *testing.T, name string, f func() (int, error), want int) {
	t.Helper()
	got, err := f()
	if err != nil || got != want {
		t.Errorf("%s = %d, %v; want %d", name, got, err, want)
	}
}
