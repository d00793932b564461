package gpu

import (
	"fmt"

	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer/backend"
)

// setMoments sets the per-moment storage of l from a: the _q kernels when
// the moments are not both float32 or both bfloat16. The scale pointers
// are the caller's to set.
func setMoments(l *kernels.UpdateLaunch, a *backend.UpdateArgs) {
	mt, vt := a.MomentTypes()
	if a.Rule == backend.RuleSGD {
		vt = mt
	}
	if mt == vt && mt != backend.MomentFP8 {
		l.MomentBF16 = mt == backend.MomentBFloat16
		return
	}
	l.PerMoment = true
	l.MType, l.VType = kernelMoment(mt), kernelMoment(vt)
	if a.Rule == backend.RuleSGD {
		l.VType = kernels.MomentF32 // unused
	}
	l.MomentBlock, l.MomentSeed, l.MomentBase = a.MomentBlock, a.MomentSeed, uint64(a.MomentBase)
}

// kernelMoment is t as the kernels name it.
func kernelMoment(t backend.MomentDType) kernels.MomentType {
	switch t {
	case backend.MomentFloat32:
		return kernels.MomentF32
	case backend.MomentBFloat16:
		return kernels.MomentBF16
	case backend.MomentFP8:
		return kernels.MomentFP8
	}
	panic(fmt.Sprintf("gpu: moment type %s", t))
}
