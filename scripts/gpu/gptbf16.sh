#!/bin/sh
# gptbf16.sh builds (here) and runs (on a GPU machine) the checks of the GPT
# model on the GPU (examples/gpt/gpumodel) with both attentions, flash (the
# default) and GEMM, and with the activations kept in bfloat16, and its
# micro-batch benchmark at the 124M and 1.3B shapes.
#
#   sh scripts/gpu/gptbf16.sh build   # here: binaries into $BIN (default
#                                     # /work/main/.gpu-gptbf16), xz-compressed,
#                                     # and this script as $BIN/run.sh
#   sh .gpu-gptbf16/run.sh            # there, from the root of a checkout
#                                     # (the binaries at .gpu-gptbf16/); log in
#                                     # $OUT/gptbf16.log
#
# run, GPU required (DISTOPT_REQUIRE_GPU=1: no skips), about two and a
# half minutes on a fresh machine (one H200, 2026-12-01: the model's kernel
# tests wait for the driver's JIT of the PTX):
#  1. examples/gpt/model: every kernel of gpt.cu against the float64
#     reference (TestGPU*), the bfloat16 activation kernels included;
#  2. examples/gpt/gpumodel: every test of the package, each GPU test with
#     both attentions: TestAttention* (the attention implementations
#     against the float64 model), TestGPUModelMatchesCPU (loss and
#     gradients against the float64 model, every weight recipe),
#     TestGPUOptionsBitIdentical (Recompute and KeepTransposed give the
#     default's bits), TestGPUDeterminism, TestGPUMemory (allocation =
#     PredictMemory, category by category), TestGPUTraining;
#  3. BenchmarkMicroBatch at the small and 1.3b presets (flash, gemm,
#     recompute, keep-transposed), 5 timed micro-batches each.
# Exit status 0 when everything passed; the last line says so. (That every
# launcher's kernel is in the PTX is checked without a GPU: TestLibrary of
# examples/gpt/kernels.)
set -u
name=gptbf16

build() {
	set -e
	cd "$(dirname "$0")/../.."
	bin=${BIN:-/work/main/.gpu-$name}
	rm -rf "$bin"
	mkdir -p "$bin"
	go test -c -ldflags="-s -w" -o "$bin/gpt_model.test" ./examples/gpt/model
	go test -c -ldflags="-s -w" -o "$bin/gpt_gpumodel.test" ./examples/gpt/gpumodel
	xz -9 "$bin"/*.test
	cp scripts/gpu/$name.sh "$bin/run.sh"
	{ git rev-parse HEAD; git status --short | head -5; } >"$bin/commit"
	du -sh "$bin"
}

# step NAME TIMEOUT DIR BINARY ARGS...: runs a test binary in DIR, its
# output into the log, and a summary of it on stdout.
step() {
	n=$1 limit=$2 dir=$3 prog=$4
	shift 4
	echo "== $n" >>"$log"
	(cd "$dir" && timeout "$limit" "$prog" "$@") >>"$log" 2>&1
	rc=$?
	[ $rc -eq 0 ] || status=1
	echo "== $n: exit $rc" | tee -a "$log"
}

run() {
	root=$(pwd)
	bin=$root/.gpu-$name
	out=${OUT:-$bin/out}
	mkdir -p "$out"
	log=$out/$name.log
	: >"$log"
	exe=$(mktemp -d)
	trap 'rm -rf "$exe"' EXIT
	for t in gpt_model gpt_gpumodel; do
		xz -dc "$bin/$t.test.xz" >"$exe/$t.test" && chmod +x "$exe/$t.test" ||
			{ echo "$name: $bin/$t.test.xz missing: run 'sh scripts/gpu/$name.sh build' first" | tee -a "$log"; exit 2; }
	done
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export DISTOPT_REQUIRE_GPU=1
	status=0
	{
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
		cat "$bin/commit"
	} >>"$log" 2>&1
	# A fresh machine JIT-compiles the PTX in the first process (15-30 s).
	step model-kernels 90 examples/gpt/model "$exe/gpt_model.test" -test.v -test.run 'GPU' -test.timeout 85s
	step gpumodel 180 examples/gpt/gpumodel "$exe/gpt_gpumodel.test" -test.v -test.timeout 175s
	step bench 90 examples/gpt/gpumodel "$exe/gpt_gpumodel.test" -test.run '^$' -test.timeout 85s \
		-gpt.presets small,1.3b -test.bench BenchmarkMicroBatch -test.benchtime 5x
	grep -E '^(--- |FAIL|ok|PASS)|^Benchmark' "$log" | head -80
	grep -E -B2 -A6 -- '--- FAIL' "$log" | head -60
	echo "$name status: $status ($([ $status -eq 0 ] && echo all passed || echo FAILURES))" | tee -a "$log"
	exit $status
}

case "${1:-run}" in
build) build ;;
run) run ;;
*) echo "usage: $0 [build|run]" >&2; exit 2 ;;
esac
