package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Bounds of what a reader takes from a checkpoint's small files.
const (
	// MaxIndexBytes bounds the size of index.json. An index records a few
	// hundred bytes per parameter and piece, so real ones are far smaller.
	MaxIndexBytes = 1 << 30
	// maxLatestBytes bounds the "latest" pointer: one step directory name.
	maxLatestBytes = 256
)

// openRegular opens path for reading and refuses anything but a regular
// file, without blocking: a named pipe opened for reading waits for a
// writer, and a device such as /dev/zero never ends. The open itself is
// non-blocking, and the type is checked on the opened file, so nothing
// swapped in between the check and the read escapes it. A missing file
// gives an error matching fs.ErrNotExist.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|nonBlocking, 0)
	if err != nil {
		return nil, openError(path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("checkpoint: %s is %s, not a regular file: %w", path, fileKind(st.Mode()), ErrCorrupt)
	}
	return f, nil
}

// openError describes a failed open of path: a symbolic link loop or a
// link to nothing as such, a missing file as fs.ErrNotExist.
func openError(path string, err error) error {
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("checkpoint: %s is a symbolic link loop: %w", path, ErrCorrupt)
	}
	if errors.Is(err, fs.ErrNotExist) {
		if st, lerr := os.Lstat(path); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("checkpoint: %s is a symbolic link to nothing: %w", path, ErrCorrupt)
		}
	}
	return fmt.Errorf("checkpoint: %w", err)
}

// fileKind names the type of a file that is not regular.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a " + m.Type().String() + " file"
}

// readRegular reads the regular file path whole, refusing one larger than
// limit bytes (limitName names the limit in the error).
func readRegular(path string, limit int64, limitName string) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: reading %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("checkpoint: %s is larger than %s (%d bytes): %w", path, limitName, limit, ErrCorrupt)
	}
	return b, nil
}

// present reports whether path exists, a symbolic link included whatever
// it points to, so that a loop is reported by the read that follows.
func present(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
