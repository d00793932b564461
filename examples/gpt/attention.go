package main

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/gpumodel"
)

// openAttention opens the model with o's attention through open and says
// which attention runs. With -attention auto it tries cuDNN first and
// takes the fused flash kernels only where cuDNN cannot serve: no library
// (cudnn.ErrNoLibrary), one too old (cudnn.ErrTooOld), or any failed cuDNN
// call (a *cudnn.Error: graphs refused for this shape, a library that does
// not initialize on this driver). The note names the reason, and the run
// prints it: the choice is never silent. Any other failure (device memory,
// the CUDA driver) is returned, not hidden behind the fallback.
func openAttention[M any](o options, open func(gpumodel.Attention) (M, error)) (M, string, error) {
	m, err := open(o.attention)
	if !o.attentionAuto {
		return m, o.attention.String(), err
	}
	if err == nil {
		return m, fmt.Sprintf("%v (-attention auto: cuDNN opened and took the shape)", o.attention), nil
	}
	var ce *cudnn.Error
	if !errors.Is(err, cudnn.ErrNoLibrary) && !errors.Is(err, cudnn.ErrTooOld) && !errors.Is(err, cudnn.ErrNotSupported) && !errors.As(err, &ce) {
		return m, "", fmt.Errorf("-attention auto: %w", err)
	}
	m, err2 := open(gpumodel.AttentionFlash)
	if err2 != nil {
		return m, "", fmt.Errorf("-attention auto: %w (after cuDNN: %v)", err2, err)
	}
	return m, fmt.Sprintf("%v (-attention auto: cuDNN not used: %v)", gpumodel.AttentionFlash, err), nil
}
