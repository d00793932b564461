#!/bin/sh
# flash.sh builds (here) and runs (on a GPU machine) the checks and the
# benchmarks of the fused attention kernels (internal/kernels/flash.cu)
# and of the GPT model's flash mode (gpumodel.Options.FlashAttention).
#
#   scripts/gpu/flash.sh build   # build machine: test binaries into .gpu-flash/
#   scripts/gpu/flash.sh run     # GPU machine (carry .gpu-flash); log to $OUT/flash.log
#
# run, GPU required (no skips), about two minutes:
#  1. internal/kernels: TestFlash* (kernels against the float64 reference
#     at D 64/128 and ragged seq, bit-for-bit repeat, guard columns; the
#     CPU tile model) and the PTX entry checks;
#  2. examples/gpt/gpumodel with DISTOPT_GPT_FLASH=1: every test of the
#     package with the model's attention in the flash mode (heads of 64
#     in the model tests): TestAttention* (flash against the float64
#     model), TestGPUModelMatchesCPU, TestGPUOptionsBitIdentical,
#     TestGPUDeterminism, TestGPUMemory (allocation = PredictMemory),
#     TestGPUTraining;
#  3. benchmarks: BenchmarkFlashKernels (the kernels alone), and
#     BenchmarkFlashAttention (with the copies of the heads) beside BenchmarkAttention (TF32
#     and BF16, packed) at the 124M and 1.3B shapes, and BenchmarkMicroBatch
#     (default against flash) at the 124M and 1.3B presets;
#  4. TestFlashAttention again under compute-sanitizer memcheck (out of
#     bounds and misaligned accesses), when the machine has it; its verdict
#     is its own line ("flash memcheck: ..."), not part of the status.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=.gpu-flash

build() {
	set -e
	rm -rf $bin
	mkdir -p $bin
	go test -c -ldflags="-s -w" -o $bin/internal_kernels.test ./internal/kernels
	go test -c -ldflags="-s -w" -o $bin/gpt_gpumodel.test ./examples/gpt/gpumodel
	gzip -9 $bin/*.test
	du -sh $bin
}

run() {
	set +e
	export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
	log=${OUT:-.}/flash.log
	gunzip -f $bin/*.gz
	chmod +x $bin/*.test
	status=0
	{
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
		git log -1 --format='commit %H %s' 2>/dev/null
		(cd internal/kernels && DISTOPT_REQUIRE_GPU=1 "$root/$bin/internal_kernels.test" -test.v -test.timeout 120s \
			-test.run 'Flash|Entries|PTX') || status=1
		(cd examples/gpt/gpumodel && DISTOPT_GPT_FLASH=1 DISTOPT_REQUIRE_GPU=1 "$root/$bin/gpt_gpumodel.test" -test.v \
			-test.timeout 150s) || status=1
		(cd internal/kernels && "$root/$bin/internal_kernels.test" -test.run XXX -test.timeout 60s -test.benchtime 20x \
			-test.bench 'BenchmarkFlashKernels') || status=1
		(cd examples/gpt/gpumodel && "$root/$bin/gpt_gpumodel.test" -test.run XXX -test.timeout 150s -test.benchtime 20x \
			-test.bench 'BenchmarkFlashAttention|BenchmarkAttention/(124M|1.3B)/(TF32|BF16)/packed') || status=1
		(cd examples/gpt/gpumodel && "$root/$bin/gpt_gpumodel.test" -test.run XXX -test.timeout 150s -test.benchtime 5x \
			-gpt.presets small,1.3b -test.bench 'BenchmarkMicroBatch/.*/(default|flash)$') || status=1
		san=/usr/local/cuda/bin/compute-sanitizer
		if [ -x $san ]; then
			if (cd internal/kernels && DISTOPT_REQUIRE_GPU=1 timeout 90 $san --tool memcheck --error-exitcode 3 \
				"$root/$bin/internal_kernels.test" -test.run 'TestFlashAttention$'); then
				echo "flash memcheck: ok"
			else
				echo "flash memcheck: FAILED (exit $?: 3 = memcheck errors, 124 = timeout)"
			fi
		else
			echo "flash: no compute-sanitizer at $san; memcheck skipped"
		fi
		echo "flash status: $status"
	} >"$log" 2>&1
	cat "$log"
	exit $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
