#!/bin/sh
# check.sh PTXDIR CUBINDIR SRC.cu...: run in a package's directory, it
# regenerates the PTX and cubins of the sources (gen.sh) into a temporary
# directory and fails if they differ from the committed ones, byte for byte,
# or if a committed file has no source. Without nvcc it says so and
# succeeds: the check needs the toolkit that generated the files (nvcc and
# ptxas 11.8).
set -eu
[ $# -ge 3 ] || { echo "usage: check.sh PTXDIR CUBINDIR SRC.cu..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1 || ! command -v "${PTXAS:-ptxas}" >/dev/null 2>&1; then
	echo "check: $NVCC or ptxas not found; skipping the generated-code-matches-sources check of $(pwd)"
	exit 0
fi
version=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
if [ "$version" != "11.8" ]; then
	echo "check: warning: nvcc $version, the committed code comes from nvcc 11.8" >&2
fi
ptx=$1 cubin=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/gen.sh" "$tmp/ptx" "$tmp/cubin" "$@"
for d in ptx cubin; do
	eval "dir=\$$d"
	if ! diff -r "$dir" "$tmp/$d" >"$tmp/diff" 2>&1; then
		echo "check: $(pwd)/$dir does not match its CUDA sources; run go generate in $(pwd)" >&2
		head -40 "$tmp/diff" >&2
		exit 1
	fi
done
echo "check: $(pwd): $ptx/ and $cubin/ match the CUDA sources ($(ls "$ptx" | wc -l) PTX files, $(ls "$cubin" | wc -l) cubins)"
