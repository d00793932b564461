#!/bin/sh
# gen.sh compiles every CUDA source of this directory to PTX, once per
# variant, into ptx/ and that PTX to machine code into cubin/: see
# ../ptxgen/gen.sh for the files and the flags (nvcc and ptxas 11.8,
# --fmad=false: the only fused multiply-adds are the explicit ones, so that
# kernels round exactly as the Go reference). Run it through `go generate
# ./internal/kernels`; check_ptx.sh checks the committed files.
set -eu
cd "$(dirname "$0")"
exec ../ptxgen/gen.sh ptx cubin *.cu
