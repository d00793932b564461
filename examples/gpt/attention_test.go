package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/gpumodel"
)

// TestOpenAttention checks -attention auto's choice with a fake opener:
// cuDNN when it opens; the fused flash kernels, with the reason in the
// note, when cuDNN has no library, is too old, refuses the shape, fails
// a call or finds no device memory; any other failure returned as it is,
// never flash; and an explicit choice tried alone, its error returned as
// is.
func TestOpenAttention(t *testing.T) {
	errLost := errors.New("device lost")
	for _, c := range []struct {
		flag      string
		cudnnErr  error
		want      gpumodel.Attention
		note, err string
	}{
		{"auto", nil, gpumodel.AttentionCuDNN, "cuDNN opened", ""},
		{"auto", fmt.Errorf("gpumodel: %w", cudnn.ErrNoLibrary), gpumodel.AttentionFlash, "cuDNN not used: gpumodel: cudnn: cuDNN library not available", ""},
		{"auto", cudnn.ErrTooOld, gpumodel.AttentionFlash, "too old", ""},
		{"auto", fmt.Errorf("plan: %w", cudnn.ErrNotSupported), gpumodel.AttentionFlash, "not supported", ""},
		{"auto", fmt.Errorf("gpumodel: %w", &cudnn.Error{Op: "cudnnCreate", Status: 1001, Name: "CUDNN_STATUS_NOT_INITIALIZED"}), gpumodel.AttentionFlash, "CUDNN_STATUS_NOT_INITIALIZED", ""},
		{"auto", fmt.Errorf("cudnn workspace: %w", cuda.ErrOutOfMemory), gpumodel.AttentionFlash, "out of memory", ""},
		{"auto", errLost, 0, "", "device lost"},
		{"cudnn", cudnn.ErrNoLibrary, 0, "", "not available"},
		{"flash", nil, gpumodel.AttentionFlash, "flash", ""},
	} {
		o, err := parseFlags([]string{"-backend", "gpu", "-attention", c.flag})
		if err != nil {
			t.Fatal(err)
		}
		var tried []gpumodel.Attention
		got, note, err := openAttention(o, func(a gpumodel.Attention) (gpumodel.Attention, error) {
			tried = append(tried, a)
			if a == gpumodel.AttentionCuDNN && c.cudnnErr != nil {
				return 0, c.cudnnErr
			}
			return a, nil
		})
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s with cuDNN's %v: error %v, want one containing %q (tried %v)", c.flag, c.cudnnErr, err, c.err, tried)
			}
			if len(tried) != 1 {
				t.Errorf("%s with cuDNN's %v: tried %v, want cuDNN alone", c.flag, c.cudnnErr, tried)
			}
		case err != nil:
			t.Errorf("%s with cuDNN's %v: %v", c.flag, c.cudnnErr, err)
		case got != c.want || !strings.Contains(note, c.note) || !strings.HasPrefix(note, c.want.String()):
			t.Errorf("%s with cuDNN's %v: %v, note %q; want %v and a note containing %q", c.flag, c.cudnnErr, got, note, c.want, c.note)
		}
	}
	o, err := parseFlags([]string{"-backend", "gpu"})
	if err != nil || !o.attentionAuto || o.attention != gpumodel.AttentionCuDNN {
		t.Errorf("the default -attention is %v (auto %v, error %v), want auto, cuDNN tried first", o.attention, o.attentionAuto, err)
	}
}

// fakeModel stands for a gpumodel.Model in TestOpenAttentionAccumulating:
// its attention note and whether it was closed.
type fakeModel struct {
	a      gpumodel.Attention
	note   string
	closed *int
}

func (f fakeModel) AttentionNote() string { return f.note }
func (f fakeModel) Close() error          { *f.closed++; return nil }

// TestOpenAttentionAccumulating checks that -attention auto does not keep
// a model whose cuDNN attention took the accumulating backward (its bits
// differ between runs): that model is closed and flash opened, the note
// saying why; -attention cudnn keeps it (the run prints the note).
func TestOpenAttentionAccumulating(t *testing.T) {
	const why = "the repeatable backward was refused"
	for _, c := range []struct {
		flag   string
		want   gpumodel.Attention
		closed int
	}{{"auto", gpumodel.AttentionFlash, 1}, {"cudnn", gpumodel.AttentionCuDNN, 0}} {
		o, err := parseFlags([]string{"-backend", "gpu", "-attention", c.flag})
		if err != nil {
			t.Fatal(err)
		}
		closed := 0
		m, note, err := openAttention(o, func(a gpumodel.Attention) (fakeModel, error) {
			f := fakeModel{a: a, closed: &closed}
			if a == gpumodel.AttentionCuDNN {
				f.note = why
			}
			return f, nil
		})
		if err != nil || m.a != c.want || closed != c.closed {
			t.Errorf("-attention %s, cuDNN accumulating: %v closed %d times (error %v); want %v closed %d times", c.flag, m.a, closed, err, c.want, c.closed)
		}
		if c.flag == "auto" && !strings.Contains(note, why) {
			t.Errorf("-attention auto, cuDNN accumulating: note %q does not say why flash runs", note)
		}
	}
}
