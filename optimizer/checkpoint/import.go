package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/safetensors"
)

// Importer reads initial weights from a safetensors file, such as one
// written by Export, for optimizer.New. Its Init method is an
// optimizer.InitFunc that reads, on each call, only the elements asked for;
// it may be called from several goroutines (one per in-process rank).
type Importer struct {
	path string
	f    *os.File
	h    *safetensors.Header

	mu  sync.Mutex
	err error
}

// OpenImport opens the safetensors file at path and checks that it holds
// every parameter of params (ErrParamMissing) with its shape (ErrShape) as
// F32, BF16, F16 or F64 (ErrCorrupt otherwise; the values widen exactly to
// float32, except F64, which rounds to nearest even). Tensors the
// parameters do not name are ignored. A file that breaks the safetensors
// format fails with ErrCorrupt, a short one with ErrTruncated, a missing
// one with ErrMissingFile.
func OpenImport(path string, params []optimizer.Param) (*Importer, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, ErrMissingFile)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	im := &Importer{path: path, f: f}
	if err := im.check(params); err != nil {
		f.Close()
		return nil, err
	}
	return im, nil
}

func (im *Importer) check(params []optimizer.Param) error {
	st, err := im.f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	h, _, err := safetensors.Read(im.f, st.Size())
	switch {
	case errors.Is(err, safetensors.ErrTruncated):
		return fmt.Errorf("checkpoint: %s: %v: %w", im.path, err, ErrTruncated)
	case err != nil:
		return fmt.Errorf("checkpoint: %s: %v: %w", im.path, err, ErrCorrupt)
	}
	im.h = h
	for _, p := range params {
		t, ok := h.Lookup(p.Name)
		if !ok {
			return fmt.Errorf("checkpoint: %s has no tensor %q: %w", im.path, p.Name, ErrParamMissing)
		}
		if !sameShape(t.Shape, p.Shape) {
			return fmt.Errorf("checkpoint: %s holds %q with shape %v, the parameter has %v: %w", im.path, p.Name, t.Shape, p.Shape, ErrShape)
		}
		switch t.DType {
		case safetensors.F32, safetensors.BF16, safetensors.F16, safetensors.F64:
		default:
			return fmt.Errorf("checkpoint: %s holds %q as %s, not a float type: %w", im.path, p.Name, t.DType, ErrCorrupt)
		}
	}
	return nil
}

// Init fills dst with elements [offset, offset+len(dst)) of the named
// tensor, converted to float32. On a failed read (or a name OpenImport did
// not check) Init zeroes dst, returns the error (which makes optimizer.New
// fail on every rank) and records the first one, which Err and Close return.
func (im *Importer) Init(name string, offset int, dst []float32) error {
	err := im.read(name, offset, dst)
	if err != nil {
		clear(dst)
		im.mu.Lock()
		if im.err == nil {
			im.err = err
		}
		im.mu.Unlock()
	}
	return err
}

func (im *Importer) read(name string, offset int, dst []float32) error {
	t, ok := im.h.Lookup(name)
	if !ok {
		return fmt.Errorf("checkpoint: %s has no tensor %q: %w", im.path, name, ErrParamMissing)
	}
	esz := int64(t.DType.Size())
	if offset < 0 || int64(offset+len(dst)) > t.NumElements() || t.DType.Size() == 0 {
		return fmt.Errorf("checkpoint: %s: elements [%d, %d) of %q (%d elements of %s): %w", im.path, offset, offset+len(dst), name, t.NumElements(), t.DType, ErrShape)
	}
	buf := make([]byte, int64(len(dst))*esz)
	if _, err := im.f.ReadAt(buf, im.h.DataOffset+t.Begin+int64(offset)*esz); err != nil {
		return fmt.Errorf("checkpoint: reading %q from %s: %w", name, im.path, err)
	}
	decodeValues(dst, buf, t.DType)
	return nil
}

// Err returns the first error Init met, or nil.
func (im *Importer) Err() error {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.err
}

// Close closes the file and returns the first error Init met (or the
// close's).
func (im *Importer) Close() error {
	cerr := im.f.Close()
	if err := im.Err(); err != nil {
		return err
	}
	return cerr
}
