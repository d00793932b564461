#!/bin/sh
# momfast.sh: the GPU checks and the timing of the FP8-moment update (issue
# 18: dithered second moment, branch-free scales), in two halves:
#
#   sh scripts/gpu/momfast.sh build [DIR]   build machine (Go, xz): binaries into DIR
#   sh scripts/gpu/momfast.sh runsh [DIR]   (only DIR/run.sh again)
#   sh DIR/run.sh [DIR]                     GPU machine, repository root (any checkout)
#
# DIR defaults to .gpu-momfast (git-ignored). build writes the stripped test
# binaries of optimizer/gpu and internal/kernels, distopt-bench-update, and
# any extra bench-* binaries already in DIR/extra (experiments: other PTX of
# the update kernels, built from other trees), as ONE tar.xz (a 192 MiB
# dictionary: the binaries share most of their bytes, so the archive is
# little bigger than one of them), and copies the run half to DIR/run.sh.
#
# run (under two minutes, GPU required: DISTOPT_REQUIRE_GPU=1):
#  1. optimizer/gpu TestConformance (optimizer/backendtest against the CPU
#     backend; its Moments part: every moment type, block size, gradient
#     type and rule, masters, codes and block scales byte for byte) and
#     TestStep (whole steps of optimizertest.Configs, FP8 moments included);
#  2. internal/kernels: the PTX entry and target checks, the Go models of
#     moments.cuh, TestTileSegments and TestStepControl (update kernels on
#     the device);
#  3. distopt-bench-update -tables moments (2^28 elements, AdamW + 1x128,
#     by moment storage), and the same table for every extra bench-* binary.
# One log, $OUT/momfast.log (or DIR/momfast.log); exit 0 when 1-3 passed.
set -u
[ -d optimizer/gpu ] || cd "$(dirname "$0")/../.."
dir=${2:-.gpu-momfast}

build() {
	set -e
	mkdir -p "$dir/extra"
	rm -rf "$dir/pack"
	mkdir -p "$dir/pack"
	go test -c -ldflags="-s -w" -o "$dir/pack/optimizer_gpu.test" ./optimizer/gpu
	go test -c -ldflags="-s -w" -o "$dir/pack/internal_kernels.test" ./internal/kernels
	go build -ldflags="-s -w" -o "$dir/pack/bench-update" ./cmd/distopt-bench-update
	for b in "$dir"/extra/bench-*; do
		[ -f "$b" ] && cp "$b" "$dir/pack/"
	done
	git rev-parse HEAD >"$dir/pack/commit"
	rm -f "$dir/momfast.tar.xz"
	(cd "$dir/pack" && tar cf - *) | xz -T1 --lzma2=preset=9,dict=192MiB >"$dir/momfast.tar.xz"
	rm -rf "$dir/pack"
	runsh
	du -sh "$dir/momfast.tar.xz"
}

# runsh writes the run half, DIR/run.sh: this script with DIR as its first
# argument and run as its action.
runsh() {
	sed 's/^dir=\${2:-\.gpu-momfast}$/dir=${1:-.gpu-momfast}/; s/^case "\${1:-}" in$/case run in/' scripts/gpu/momfast.sh >"$dir/run.sh"
}

run() {
	set +e
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export DISTOPT_REQUIRE_GPU=1
	root=$(pwd)
	case $dir in
	/*) bin=$dir ;;
	*) bin=$root/$dir ;;
	esac
	log=${OUT:-$bin}/momfast.log
	status=0
	{
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
		mkdir -p "$bin/x"
		if command -v xz >/dev/null 2>&1; then
			xz -dc "$bin/momfast.tar.xz" | tar -x -C "$bin/x"
		else
			python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$bin/momfast.tar.xz" | tar -x -C "$bin/x"
		fi
		chmod +x "$bin"/x/*
		echo "built from $(cat "$bin/x/commit")"
		(cd optimizer/gpu && timeout 90 "$bin/x/optimizer_gpu.test" -test.v -test.run 'TestConformance|TestStep$' -test.timeout 85s) >"$bin/og.log" 2>&1 || status=1
		echo "optimizer/gpu: $(grep -c -- '--- PASS' "$bin/og.log") passed, $(grep -c -- '--- FAIL' "$bin/og.log") failed, $(grep -c -- '--- SKIP' "$bin/og.log") skipped; Moments: $(grep -c -- '--- PASS: TestConformance/Moments/' "$bin/og.log") passed"
		grep -E -A8 -- '--- FAIL' "$bin/og.log" | head -60
		tail -2 "$bin/og.log"
		(cd internal/kernels && timeout 30 "$bin/x/internal_kernels.test" -test.v -test.short \
			-test.run 'TestEntries|TestPTXTargets|TestDitherModel|TestMomentScaleModel|TestTileSegments|TestStepControl') >"$bin/ik.log" 2>&1 || status=1
		grep -E -- '^(--- |ok|FAIL|PASS)' "$bin/ik.log" | head -20
		echo "== bench-update -tables moments"
		timeout 30 "$bin/x/bench-update" -tables moments || status=1
		for b in "$bin"/x/bench-*; do
			[ "$(basename "$b")" = bench-update ] && continue
			# a new update PTX takes the driver's JIT tens of seconds (the
			# branch's was compiled, and cached, by the tests above)
			echo "== $(basename "$b") -tables moments -iters 10 (experiment)"
			timeout 60 "$b" -tables moments -iters 10 -warmup 2 || status=1
		done
		echo "== momfast status $status"
	} >"$log" 2>&1
	cat "$log"
	exit $status
}

case "${1:-}" in
build) build ;;
runsh) runsh ;;
run) run ;;
*)
	echo "usage: sh scripts/gpu/momfast.sh build|runsh|run [DIR]" >&2
	exit 2
	;;
esac
