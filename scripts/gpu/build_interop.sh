#!/bin/sh
# build_interop.sh (run on the build machine, AFTER scripts/gpu/build.sh,
# which empties the manifest) adds the gorgonia interop tests to the GPU
# suite: .gpu/interop_gorgonia.test, built with -tags gorgonia, and its line
# in .gpu/manifest, so that scripts/gpu/run.sh runs it on the GPU machine.
#
# The tag needs cgo, CUDA 11.x or 12.x headers (cuda.h; gorgonia.org/cu
# v0.9.6 does not compile against CUDA 13's) and libcuda.so to link. Where
# it does not build, the script says so and exits 0 without touching the
# manifest (STRICT=1 makes that an error). The binary exits at start on a
# host without a GPU (gorgonia.org/cu's package init): run it only there.
set -u
cd "$(dirname "$0")/../.."
mkdir -p .gpu
bin=interop_gorgonia.test
rm -f ".gpu/$bin"
if go test -tags gorgonia -c -o ".gpu/$bin" ./interop/gorgonia; then
	if ! grep -q "^$bin " .gpu/manifest 2>/dev/null; then
		echo "$bin interop/gorgonia" >>.gpu/manifest
	fi
	echo "build_interop: interop/gorgonia -> .gpu/$bin"
	exit 0
fi
echo "build_interop: -tags gorgonia does not build here (see above); .gpu/$bin not built" >&2
[ "${STRICT:-0}" = 1 ] && exit 1
exit 0
