#!/bin/sh
# moments.sh: the GPU checks of moments stored per type (float32, bfloat16,
# FP8 with block scales; issue 18), in two halves:
#   sh scripts/gpu/moments.sh build [DIR]   on the build machine (Go, no GPU)
#   sh scripts/gpu/moments.sh run [DIR]     on the GPU machine, repository root
# DIR defaults to .gpu-moments (git-ignored); build copies this script
# there too, so that a tree without it runs `sh DIR/moments.sh run DIR` from
# its root. run checks the CUDA backend
# byte for byte against the CPU (optimizer/backendtest, whose Moments part
# covers every moment type, block size and gradient type; TestStep: whole
# steps of optimizertest.Configs, FP8-moment configurations included), runs
# the kernel tests, and times the update by moment storage
# (distopt-bench-update's second table). Logs go to $OUT (or DIR/out).
set -u
[ -d optimizer/gpu ] || cd "$(dirname "$0")/../.." # run from the repository root
dir=${2:-.gpu-moments}
case ${1:-} in
build)
	set -e
	mkdir -p "$dir"
	go test -c -o "$dir/optimizer_gpu.test" ./optimizer/gpu
	go test -c -o "$dir/internal_kernels.test" ./internal/kernels
	go build -o "$dir/" ./cmd/distopt-bench-update
	cp scripts/gpu/moments.sh "$dir/"
	git rev-parse HEAD >"$dir/commit"
	echo "moments.sh: built into $dir"
	;;
run)
	root=$(pwd)
	case $dir in
	/*) bin=$dir ;;
	*) bin=$root/$dir ;;
	esac
	out=${OUT:-$bin/out}
	mkdir -p "$out"
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export DISTOPT_REQUIRE_GPU=1
	status=0
	(cd optimizer/gpu && timeout 240 "$bin/optimizer_gpu.test" -test.v -test.run 'TestConformance|TestStep$') >"$out/optimizer_gpu.log" 2>&1 || status=1
	tail -3 "$out/optimizer_gpu.log"
	grep -E -A4 '^\s*--- FAIL' "$out/optimizer_gpu.log" | head -40
	(cd internal/kernels && timeout 150 "$bin/internal_kernels.test") >"$out/internal_kernels.log" 2>&1 || status=1
	tail -2 "$out/internal_kernels.log"
	timeout 120 "$bin/distopt-bench-update" >"$out/bench-update.md" 2>&1 || status=1
	cat "$out/bench-update.md"
	echo "== moments.sh: status $status"
	exit $status
	;;
*)
	echo "usage: sh scripts/gpu/moments.sh build|run [DIR]" >&2
	exit 2
	;;
esac
