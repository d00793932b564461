#!/bin/sh
# check_ptx.sh regenerates the PTX into a temporary directory and fails if it
# differs from the committed files in ptx/ (or if a PTX file has no source).
# Without nvcc it says so and succeeds: the check needs the toolkit that
# generated the files (nvcc 11.8).
set -eu
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1; then
	echo "check_ptx: $NVCC not found; skipping the PTX-matches-sources check"
	exit 0
fi
version=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
if [ "$version" != "11.8" ]; then
	echo "check_ptx: warning: nvcc $version, the committed PTX comes from nvcc 11.8" >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./gen.sh "$tmp"
if ! diff -r ptx "$tmp" >"$tmp.diff" 2>&1; then
	echo "check_ptx: the committed PTX does not match its CUDA sources; run go generate ./internal/kernels" >&2
	head -40 "$tmp.diff" >&2
	rm -f "$tmp.diff"
	exit 1
fi
rm -f "$tmp.diff"
echo "check_ptx: ptx/ matches the CUDA sources ($(ls ptx | wc -l) files)"
