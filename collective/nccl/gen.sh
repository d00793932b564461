#!/bin/sh
# gen.sh compiles transform.cu to transform.ptx (compute_80) with nvcc 11.8
# (Debian's nvidia-cuda-toolkit), whose PTX ISA 7.8 loads on every driver
# from 520 on. With "check" as argument it regenerates into a temporary file
# and fails if the committed PTX differs. Run it through
# `go generate ./collective/nccl`.
set -eu
cd "$(dirname "$0")"
export NVCC=${NVCC:-nvcc}
out=transform.ptx
if [ "${1:-}" = check ]; then
	if ! command -v "$NVCC" >/dev/null 2>&1; then
		echo "gen.sh: $NVCC not found; skipping the PTX check"
		exit 0
	fi
	out=$(mktemp)
	trap 'rm -f "$out"' EXIT
fi
../../internal/ptxgen/nvcc.sh transform.cu "$out" 80
if [ "${1:-}" = check ]; then
	diff -q transform.ptx "$out" >/dev/null || { echo "gen.sh: transform.ptx does not match transform.cu" >&2; exit 1; }
	echo "gen.sh: transform.ptx matches transform.cu"
fi
