#!/bin/sh
# check_ptx.sh regenerates the PTX and the cubins into a temporary directory
# and fails if they differ from the committed files in ptx/ and cubin/ (see
# gen.sh). Without nvcc it says so and succeeds.
set -eu
cd "$(dirname "$0")"
export CUDA_INCLUDE=../../../internal/kernels
exec ../../../internal/ptxgen/check.sh ptx cubin *.cu
