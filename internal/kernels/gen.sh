#!/bin/sh
# gen.sh compiles every CUDA source of this directory to PTX, once per
# variant, into ptx/ (or the directory given as $1):
#   ptx/<name>_sm80.ptx  -arch=compute_80  (FP8 conversions in software)
#   ptx/<name>_sm90.ptx  -arch=compute_90  (hardware FP8 conversions)
# with nvcc 11.8 (Debian's nvidia-cuda-toolkit), whose PTX ISA 7.8 loads on
# every driver from 520 on. --fmad=false: the only fused multiply-adds are
# the explicit ones (__fmaf_rn), so that kernels round exactly as the Go
# reference does. Run it through `go generate ./internal/kernels`.
set -eu
cd "$(dirname "$0")"
out=${1:-ptx}
export NVCC=${NVCC:-nvcc}
mkdir -p "$out"
for cu in *.cu; do
	name=${cu%.cu}
	for v in 80 90; do
		../ptxgen/nvcc.sh "$cu" "$out/${name}_sm$v.ptx" "$v" .
	done
done
