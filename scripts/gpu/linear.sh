#!/bin/sh
# linear.sh builds (here) and runs (on a GPU machine) the GPU checks and the
# benchmark of issue 23 (gemm.Linear: activations kept in FP8 once).
#
#   scripts/gpu/linear.sh build   # build machine: gemm's test binary into .gpu-linear/
#   scripts/gpu/linear.sh run     # GPU machine (carry .gpu-linear); log to $OUT/linear.log
#
# run: every gemm test with the GPU required (TestLinear*, and the
# products' tests, since the engine's scratch code changed), then
# BenchmarkLinear (the 1.3B GPT's four linear layers at 16384 tokens,
# transient against kept transposes, 3 counts).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=.gpu-linear

build() {
	set -e
	mkdir -p $bin
	go test -c -ldflags="-s -w" -o $bin/gemm.test ./gemm
}

run() {
	export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
	log=${OUT:-.}/linear.log
	status=0
	{
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
		(cd gemm && DISTOPT_REQUIRE_GPU=1 "$root/$bin/gemm.test" -test.v -test.run 'Linear|Requantized') || status=1
		(cd gemm && DISTOPT_REQUIRE_GPU=1 "$root/$bin/gemm.test" -test.run .) || status=1
		(cd gemm && "$root/$bin/gemm.test" -test.run XXX -test.bench 'BenchmarkLinear$' -test.benchtime 20x -test.count 3) || status=1
	} >"$log" 2>&1
	cat "$log"
	exit $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
