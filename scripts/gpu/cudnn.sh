#!/bin/sh
# cudnn.sh checks and times cuDNN's fused attention (examples/gpt/cudnn,
# gpumodel's AttentionCuDNN; issue 37) in one call on a one-GPU machine:
#
#   sh scripts/gpu/cudnn.sh build   # here: the test binaries (xz) into $BIN
#   sh scripts/gpu/cudnn.sh run     # there (carry $BIN); logs into $OUT
#
# run, GPU and cuDNN required (DISTOPT_REQUIRE_GPU=1: a missing cuDNN
# fails instead of skipping), about three minutes:
#  1. examples/gpt/cudnn whole, with CUDNN_LOGLEVEL_DBG=2 (cuDNN's reasons
#     for a refused graph go to $OUT/cudnn_dbg.log, whose end is printed
#     on failure): the CPU interpreter and emission tests, then
#     TestAttentionGPU (cuDNN in the model's layout against the float64
#     reference and the fused kernels at a small shape, D 128, and 124M);
#  2. gpumodel's TestCuDNN*: PredictMemory's count and 30 training steps
#     with -attention cudnn against the fused kernels';
#  3. BenchmarkAttention (logging off): cuDNN and the fused kernels,
#     forward and backward, at the 124M and 1.3B shapes, 20 iterations.
# cuDNN is searched for as cudnn.Default does (CUDNN_LIBRARY, then
# libcudnn.so.9, then PyTorch's wheel in /opt/torch/.venv); the wheel's
# cuDNN and NVRTC directories are appended to LD_LIBRARY_PATH so that its
# runtime-compiled engines find NVRTC (lib.sh's cudnn_env, which
# speed37.sh shares). BIN defaults to .gpu-cudnn (ignored
# by git).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=${BIN:-.gpu-cudnn}
. scripts/gpu/lib.sh

build() {
	set -e
	rm -rf "$bin"
	mkdir -p "$bin"
	tests examples/gpt/cudnn examples/gpt/gpumodel
	pack $(cd "$bin" && ls *.test)
	stamp
}

run() {
	set +e
	unpack
	export DISTOPT_REQUIRE_GPU=1
	cudnn_env
	status=0
	echo "== 1. examples/gpt/cudnn tests ($(date +%T))"
	CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$OUT/cudnn_dbg.log" \
		t cudnn examples/gpt/cudnn 300 examples_gpt_cudnn.test || status=1
	cat "$OUT/cudnn.summary"
	grep -E 'cuDNN [0-9]' "$OUT/cudnn.log" | head -2
	echo "== 2. gpumodel TestCuDNN* ($(date +%T))"
	CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$OUT/cudnn_dbg_model.log" \
		t gpumodel examples/gpt/gpumodel 240 examples_gpt_gpumodel.test -test.run 'CuDNN' || status=1
	cat "$OUT/gpumodel.summary"
	grep -E 'losses' "$OUT/gpumodel.log"
	[ $status -eq 0 ] || cudnn_log_tail "$OUT"/cudnn_dbg*.log
	echo "== 3. BenchmarkAttention ($(date +%T))"
	exe=$root/$bin/examples_gpt_cudnn.test
	case $bin in /*) exe=$bin/examples_gpt_cudnn.test ;; esac
	(cd examples/gpt/cudnn && timeout 240 "$exe" -test.run '^$' \
		-test.bench BenchmarkAttention -test.benchtime 20x -test.v) >"$OUT/bench.log" 2>&1 || status=1
	grep -E '^(Benchmark|ok|FAIL|---)|workspaces|cuDNN' "$OUT/bench.log"
	echo "== cudnn.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES) ($(date +%T))"
	(cd "$OUT" && tar czf cudnn_logs.tgz ./*.log && rm -f ./cudnn_dbg*.log)
	return $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
