#!/bin/sh
# nvcc.sh SRC OUT ARCH [INCLUDE_DIR]: the one nvcc command line of the
# project, shared by internal/kernels/gen.sh and collective/nccl/gen.sh:
# PTX for compute_ARCH from the CUDA source SRC into OUT, with nvcc 11.8
# (Debian's nvidia-cuda-toolkit; PTX ISA 7.8 loads on every driver from 520
# on), C++14, and --fmad=false so that the only fused multiply-adds are the
# explicit ones (__fmaf_rn) and kernels round exactly as the Go reference.
# NVCC overrides the compiler.
set -eu
[ $# -ge 3 ] || { echo "usage: nvcc.sh SRC OUT ARCH [INCLUDE_DIR]" >&2; exit 2; }
src=$1 out=$2 arch=$3
inc=${4:+-I$4}
exec "${NVCC:-nvcc}" -ptx -arch=compute_"$arch" -std=c++14 --fmad=false $inc -o "$out" "$src"
