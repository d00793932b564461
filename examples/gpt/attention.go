package main

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/gpumodel"
)

// openAttention opens the model with o's attention through open and says
// which attention runs. With -attention auto it tries cuDNN first and
// takes the fused flash kernels only where cuDNN cannot serve: no library
// (cudnn.ErrNoLibrary), one too old (cudnn.ErrTooOld), or any failed cuDNN
// call (a *cudnn.Error: graphs refused for this shape, a library that does
// not initialize on this driver), no device memory for cuDNN's workspace
// (cuda.ErrOutOfMemory: flash needs none), and where cuDNN refused the
// repeatable form of its backward (gpumodel.Model.AttentionNote: the
// accumulating one would make a resumed run differ from a straight one).
// The note names the reason, and the run prints it: the choice is never
// silent. Any other failure (the CUDA driver, the model's options) is
// returned as it is, not hidden behind the fallback.
func openAttention[M any](o options, open func(gpumodel.Attention) (M, error)) (M, string, error) {
	m, err := open(o.attention)
	if !o.attentionAuto {
		return m, o.attention.String(), err
	}
	if err == nil {
		n, ok := any(m).(attentionNoter)
		if !ok || n.AttentionNote() == "" {
			return m, fmt.Sprintf("%v (-attention auto: cuDNN opened and took the shape)", o.attention), nil
		}
		// cuDNN took the accumulating backward only: auto keeps runs
		// repeatable (a resumed run equal to a straight one) with flash.
		err = fmt.Errorf("%s", n.AttentionNote())
		if cerr := n.Close(); cerr != nil {
			return m, "", fmt.Errorf("-attention auto: closing the model with cuDNN's accumulating attention: %w", cerr)
		}
		return openFlash(open, err)
	}
	var ce *cudnn.Error
	if !errors.Is(err, cudnn.ErrNoLibrary) && !errors.Is(err, cudnn.ErrTooOld) && !errors.Is(err, cudnn.ErrNotSupported) &&
		!errors.As(err, &ce) && !errors.Is(err, cuda.ErrOutOfMemory) {
		return m, "", err // not attention's: flash would fail alike
	}
	return openFlash(open, err)
}

// A gpumodel.Model is what openAttention asks attentionNoter of.
var _ attentionNoter = (*gpumodel.Model)(nil)

// attentionNoter is what openAttention asks of a model cuDNN opened
// (gpumodel.Model): whether its attention departs from the repeatable
// form, and how to free it.
type attentionNoter interface {
	AttentionNote() string
	Close() error
}

// openFlash is -attention auto's fallback: the flash kernels, the reason
// cuDNN was not used in the note.
func openFlash[M any](open func(gpumodel.Attention) (M, error), why error) (M, string, error) {
	m, err := open(gpumodel.AttentionFlash)
	if err != nil {
		return m, "", fmt.Errorf("-attention auto: %w (after cuDNN: %v)", err, why)
	}
	return m, fmt.Sprintf("%v (-attention auto: cuDNN not used: %v)", gpumodel.AttentionFlash, why), nil
}
