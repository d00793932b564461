#!/bin/sh
# gen.sh PTXDIR CUBINDIR SRC.cu...: the generated code of a package of CUDA
# kernels, run in the package's directory (its headers are found there, and
# in CUDA_INCLUDE, such as ../../../internal/kernels, when set).
# For each source NAME.cu and variant:
#   PTXDIR/NAME_sm80.ptx            PTX for compute_80 (FP8 conversions in software)
#   PTXDIR/NAME_sm90.ptx            PTX for compute_90 (hardware FP8 conversions)
#   CUBINDIR/NAME_sm80.sm_80.cubin  its machine code for 8.x GPUs (A100, L40, RTX 40)
#   CUBINDIR/NAME_sm90.sm_90.cubin  for 9.x (H100, H200)
# with nvcc.sh and ptxas.sh (nvcc 11.8). Newer GPUs JIT-compile the PTX, as
# does a 9.0 GPU asked for the sm80 variant (the tests of the software FP8
# path): a cubin of it for sm_90 would only enlarge every binary.
# ptxgen.Load reads this layout back. A module named in the package's file
# ptxonly (one per line, # comments) gets no cubin: the driver JIT-compiles
# its PTX, for modules whose ptxas 11.8 code is measured slower than the
# driver's JIT. JOBS sources are compiled at a time (default 2). Stale
# files of the two directories are removed first.
set -eu
[ $# -ge 3 ] || { echo "usage: gen.sh PTXDIR CUBINDIR SRC.cu..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
if [ "$1" = -1 ]; then # one source: gen.sh -1 PTXDIR CUBINDIR SRC
	name=$(basename "$4" .cu)
	"$here/nvcc.sh" "$4" "$2/${name}_sm80.ptx" 80 "${CUDA_INCLUDE:-.}"
	"$here/nvcc.sh" "$4" "$2/${name}_sm90.ptx" 90 "${CUDA_INCLUDE:-.}"
	if [ -f ptxonly ] && sed 's/#.*//' ptxonly | grep -qx "[[:space:]]*$name[[:space:]]*"; then
		exit
	fi
	"$here/ptxas.sh" "$2/${name}_sm80.ptx" "$3/${name}_sm80.sm_80.cubin" 80
	"$here/ptxas.sh" "$2/${name}_sm90.ptx" "$3/${name}_sm90.sm_90.cubin" 90
	exit
fi
ptx=$1 cubin=$2
shift 2
mkdir -p "$ptx" "$cubin"
rm -f "$ptx"/*.ptx "$cubin"/*.cubin
printf '%s\n' "$@" | xargs -P "${JOBS:-2}" -I{} "$here/gen.sh" -1 "$ptx" "$cubin" {}
