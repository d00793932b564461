#!/bin/sh
# ptxas.sh PTX OUT ARCH: the one ptxas command line of the project, machine
# code for sm_ARCH from the PTX file PTX into the cubin OUT, with the ptxas
# of nvcc 11.8 and -fmad=false: the PTX's separate multiplies and adds stay
# separate, so that the kernels round exactly as the Go reference. The
# output depends only on the PTX (no paths or dates): check.sh compares it
# byte for byte. PTXAS overrides the assembler.
set -eu
[ $# -eq 3 ] || { echo "usage: ptxas.sh PTX OUT ARCH" >&2; exit 2; }
exec "${PTXAS:-ptxas}" -arch=sm_"$3" -O3 --fmad=false -o "$2" "$1"
