#!/bin/sh
# gen.sh compiles the CUDA sources of this directory to PTX (ptx/) and
# machine code (cubin/) with the module's one toolchain script,
# ../../../internal/ptxgen/gen.sh (nvcc and ptxas 11.8, --fmad=false). The
# shared headers (bf16.cuh, common.cuh; fp8.cuh and segments.cuh for
# gptfused.cu; gptbwd.cu's block_max_atomic from common.cuh) come from ../../../internal/kernels through CUDA_INCLUDE: only this script needs them, the Go build embeds the
# generated files. Run it through `go generate ./examples/gpt/kernels`;
# check_ptx.sh checks the committed files.
set -eu
cd "$(dirname "$0")"
export CUDA_INCLUDE=../../../internal/kernels
exec ../../../internal/ptxgen/gen.sh ptx cubin *.cu
