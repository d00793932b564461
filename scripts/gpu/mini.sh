#!/bin/sh
# mini.sh: the GPU tests of a few packages in one device call, without
# building and carrying the whole suite (suite.sh pack takes 7 minutes here
# and 27 MB).
#
#   sh scripts/gpu/mini.sh build PKG...   (here) a stripped test binary of
#                                         each package, a manifest and the
#                                         commit, in one archive:
#                                         .gpu-mini/t.tar.xz
#   ... the device call: carry [".gpu-mini"] (and `sh scripts/gpu/suite.sh
#       hold` first if the tree with the PTX and cubins is too large), command
#       sh scripts/gpu/mini.sh run [ARGS]
#
# run (on the GPU machine) unpacks the binaries into .gpu/ and runs
# scripts/gpu/run.sh with GPUS=1 BENCH=0 and cuDNN on the loader's path
# (lib.sh's cudnn_env); ARGS go to every binary (e.g. -test.run GPU), and
# run.sh's environment applies (ONLY=substring, TIMEOUT, OUT).
# Example: sh scripts/gpu/mini.sh build examples/gpt/cudnn examples/gpt
set -eu
cd "$(dirname "$0")/../.."
root=$(pwd)
case ${1:-} in
build)
	shift
	[ $# -gt 0 ] || { echo "mini.sh build: name the packages (e.g. examples/gpt/cudnn)" >&2; exit 2; }
	bin=$(mktemp -d)
	trap 'rm -rf "$bin"' EXIT
	# shellcheck source=lib.sh
	. "$root/scripts/gpu/lib.sh"
	for p; do
		p=${p#./}
		name=$(echo "$p" | tr / _).test
		echo "build: $p -> $name"
		tests "$p"
		[ -e "$bin/$name" ] || { echo "mini.sh: $p has no tests" >&2; exit 1; }
		echo "$name $p" >>"$bin/manifest"
	done
	stamp "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	mkdir -p .gpu-mini
	cp "$bin/commit" .gpu-mini/commit
	(cd "$bin" && tar cf - .) | xz -T2 -6 >.gpu-mini/t.tar.xz
	ls -l .gpu-mini/t.tar.xz
	;;
run)
	shift
	mkdir -p .gpu
	rm -f .gpu/*.test
	xz -dc .gpu-mini/t.tar.xz | tar x -C .gpu
	# shellcheck source=lib.sh
	. "$root/scripts/gpu/lib.sh"
	LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
	cudnn_env >/dev/null
	GPUS=1 BENCH=0 sh scripts/gpu/run.sh "$@"
	;;
*)
	sed -n '2,19p' "$0"
	exit 2
	;;
esac
