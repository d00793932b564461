#!/bin/sh
# speed37.sh checks and times issue 37's speed levers for the GPT example
# (fused FP8 producers by default, the backward's folded amaxes, -act-grad
# bf16, -grad-type bf16, -epilogue, -attention cudnn, -fuse-dy) in one call on a
# one-GPU machine; none of them has run on a GPU before:
#
#   sh scripts/gpu/speed37.sh build   # here: the test binaries into $BIN
#   sh scripts/gpu/speed37.sh run     # there (carry $BIN); logs into $OUT
#
# build puts five stripped test binaries into $BIN (default .gpu-speed37,
# ignored by git) as one solid archive (lib.sh's pack, 9.3 MB). They embed
# the PTX and cubins, and none of the tests below reads them from disk, so
# internal/kernels/{ptx,cubin} and examples/gpt/kernels/{ptx,cubin} (53
# MB) must be moved out of the tree for the call: the tracked tree is 59
# MB with them, 6 MB without, and tree and carry travel under 64 MiB. The
# call: carry [".gpu-speed37"], timeout_s 600, command
# `OUT=$OUT sh scripts/gpu/speed37.sh run`.
#
# run, GPU required (DISTOPT_REQUIRE_GPU=1) and cuDNN found as cudnn.sh
# finds it (lib.sh's cudnn_env), each step under its own limit (a Go
# -test.timeout 5 s shorter, so that a hang ends with the goroutines'
# stacks in its log), clipped so that the correctness steps end by
# 360 s and the speed steps by 530 s after the start (a step left with
# less than 10 s is skipped and counts as a failure); expected about 300 s
# in all:
#  1. correctness, -test.run filters only:
#     kernels    (90 s) examples/gpt/kernels: the fused FP8 producers, the
#                       backward's folded amaxes, the fused dy cast
#                       (TestGPTDYCast), bfloat16 accumulation,
#                       TestImages (cubins on sm_90, PTX for flash);
#     gemm       (90 s) gemm: TestLinear, TestLinearBackwardAmax,
#                       TestLinearBackwardCast, TestLinearDGradBF16,
#                       TestBiasEpilogue;
#     cublaslt   (40 s) internal/cublaslt: TestBiasEpilogue;
#     gpumodel  (150 s) examples/gpt/gpumodel: every option against the
#                       default's bits, act-grad bf16, the epilogue, bf16
#                       gradients, PredictMemory = allocation, the CPU model;
#     cudnn     (120 s) examples/gpt/cudnn whole, CUDNN_LOGLEVEL_DBG=2;
#     gpumodel_cudnn (90 s) gpumodel's TestCuDNN*, likewise; on either's
#                       failure the end of cuDNN's log is printed.
#  2. speed, benchmarks only, each once:
#     microbatch_small (60 s) BenchmarkMicroBatch at 124M (4 x 1024), 100
#                       steps per case: flash (the default), unfused,
#                       act-grad-bf16, epilogue, cudnn, fuse-dy (gemm, recompute and
#                       keep-transposed are left out);
#     microbatch_1.3b (150 s) the same at 1.3B (4 x 2048), 30 steps;
#     fused      (45 s) examples/gpt/kernels BenchmarkFusedProducers, 1000x;
#     attention  (60 s) examples/gpt/cudnn BenchmarkAttention (cuDNN and the
#                       fused kernels at 124M and 1.3B), 200x;
#     forwardbias (45 s) gemm BenchmarkForwardBias (float32, bf16,
#                       bf16-bias at qkv's and fc's 1.3B shapes), 500x.
#  3. a summary: each step's exit status, time and pass/fail/skip counts,
#     the benchmark lines, and the ratios: tokens/s of each MicroBatch case
#     over flash's per preset (with the activation memory), unfused
#     gpu-us/op over fused's and the epilogue kernel's, bf16 and bf16-bias
#     TFLOP/s over float32's, flash's ms/op over cuDNN's. It is also
#     $OUT/speed37_summary.txt; every log is in $OUT/speed37_logs.tgz.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=${BIN:-.gpu-speed37}
. scripts/gpu/lib.sh

binaries='examples_gpt_kernels.test gemm.test internal_cublaslt.test examples_gpt_gpumodel.test examples_gpt_cudnn.test'

build() {
	set -e
	rm -rf "$bin"
	mkdir -p "$bin"
	tests examples/gpt/kernels gemm internal/cublaslt examples/gpt/gpumodel examples/gpt/cudnn
	# shellcheck disable=SC2086 # one name a word
	pack $binaries
	stamp
	ls -l "$bin"
}

# lim LIMIT END: LIMIT, or the seconds left until $t0 + END where fewer;
# 0 where fewer than 10 are left.
lim() {
	l=$((t0 + $2 - $(date +%s)))
	[ "$l" -gt "$1" ] && l=$1
	[ "$l" -lt 10 ] && l=0
	echo "$l"
}

# step NAME DIR LIMIT END BINARY ARGS...: lib.sh's t under lim's limit,
# its summary printed; status is 1 where it fails or is skipped.
step() {
	sname=$1 sdir=$2 slim=$(lim "$3" "$4") sexe=$5
	shift 5
	echo "== $sname ($(date +%T), limit $slim s)"
	if [ "$slim" -eq 0 ]; then
		echo "== $sname: skipped, the call's time is spent" | tee "$OUT/$sname.summary"
		status=1
		return 1
	fi
	t "$sname" "$sdir" "$slim" "$sexe" -test.timeout "$((slim - 5))s" "$@"
	src=$?
	[ $src -eq 0 ] || status=1
	case $src in 124 | 137) sed -i "1s/\$/ (killed at the limit)/" "$OUT/$sname.summary" ;; esac
	cat "$OUT/$sname.summary"
	return $src
}

# ratios UNIT BASE HIGHER [SWAP]: for the benchmark lines on stdin, each
# case's UNIT against the case BASE of its group (the name's last element
# is the case, the rest the group; with SWAP the one before last is the
# case): case over base where HIGHER is 1 (a rate), base over case where
# it is 0 (a time); above 1 is faster. Extra columns for MicroBatch's
# memory.
ratios() {
	awk -v unit="$1" -v base="$2" -v higher="$3" -v swap="${4:-0}" '
	/^Benchmark[^ \t]*[ \t]+[0-9]+[ \t]/ {
		n = split($1, a, "/")
		sub(/-[0-9]+$/, "", a[n])
		if (swap) { c = a[n-1]; a[n-1] = a[n] } else c = a[n]
		g = a[2]
		for (i = 3; i < n; i++) g = g "/" a[i]
		v = ""; act = ""; dev = ""
		for (i = 2; i < NF; i++) {
			if ($(i+1) == unit) v = $i
			if ($(i+1) == "activation-MiB/step") act = $i
			if ($(i+1) == "device-MiB") dev = $i
		}
		if (v == "") next
		k = g SUBSEP c
		if (!(k in val)) { order[++m] = k }
		val[k] = v; mem[k] = (act == "" ? "" : sprintf("  activation %.0f MiB, device %.0f MiB", act, dev))
	}
	END {
		for (j = 1; j <= m; j++) {
			split(order[j], p, SUBSEP)
			b = p[1] SUBSEP base
			r = "-"
			if ((b in val) && val[b] > 0 && val[order[j]] > 0)
				r = sprintf("%.3fx", higher ? val[order[j]] / val[b] : val[b] / val[order[j]])
			printf "   %-20s %-14s %12.6g %-10s %7s%s\n", p[1], p[2], val[order[j]], unit, r, mem[order[j]]
		}
	}'
}

run() {
	set +e
	t0=$(date +%s)
	unpack
	export DISTOPT_REQUIRE_GPU=1
	cudnn_env
	status=0
	cor=360 # the correctness steps end by t0 + cor, the speed steps by t0 + spd
	spd=530

	echo "==== 1. correctness ($(date +%T))"
	step kernels examples/gpt/kernels 90 $cor examples_gpt_kernels.test -test.run \
		'^(TestGPTLayerNormFP8|TestGPTBiasGELUFP8|TestGPTGELUFP8|TestGPTLayerNormGradXAmax|TestGPTGELUGradAmax|TestGPTDYCast|TestGPUAccumulateBF16|TestImages)$'
	step gemm gemm 90 $cor gemm.test -test.run '^(TestLinear|TestLinearBackwardAmax|TestLinearBackwardCast|TestLinearDGradBF16|TestBiasEpilogue)$'
	grep -E 'differ' "$OUT/gemm.log" 2>/dev/null | head -8
	step cublaslt internal/cublaslt 40 $cor internal_cublaslt.test -test.run '^TestBiasEpilogue$'
	step gpumodel examples/gpt/gpumodel 150 $cor examples_gpt_gpumodel.test -test.run \
		'^(TestGPUOptionsBitIdentical|TestGPUActGradBF16|TestGPUEpilogue|TestGPUBF16Grads|TestGPUMemory|TestGPUModelMatchesCPU)$'
	grep -E 'with the epilogue|ulp from the two passes|relative L2' "$OUT/gpumodel.log" 2>/dev/null | head -12
	dnn=0
	CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$OUT/cudnn_dbg.log" \
		step cudnn examples/gpt/cudnn 120 $cor examples_gpt_cudnn.test || dnn=1
	grep -E 'cuDNN [0-9]' "$OUT/cudnn.log" 2>/dev/null | head -2
	CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$OUT/cudnn_dbg_model.log" \
		step gpumodel_cudnn examples/gpt/gpumodel 90 $cor examples_gpt_gpumodel.test -test.run '^TestCuDNN' || dnn=1
	grep -E 'losses' "$OUT/gpumodel_cudnn.log" 2>/dev/null
	[ $dnn -eq 0 ] || cudnn_log_tail "$OUT"/cudnn_dbg*.log

	echo "==== 2. speed ($(date +%T))"
	cases='^(flash|unfused|act-grad-bf16|epilogue|cudnn|fuse-dy)$'
	step microbatch_small examples/gpt/gpumodel 60 $spd examples_gpt_gpumodel.test -test.run '^$' \
		-test.bench "^BenchmarkMicroBatch\$/^small\$/$cases" -test.benchtime 100x -gpt.presets small
	step microbatch_1.3b examples/gpt/gpumodel 150 $spd examples_gpt_gpumodel.test -test.run '^$' \
		-test.bench "^BenchmarkMicroBatch\$/^1.3b\$/$cases" -test.benchtime 30x -gpt.presets 1.3b
	step fused examples/gpt/kernels 45 $spd examples_gpt_kernels.test -test.run '^$' \
		-test.bench '^BenchmarkFusedProducers$' -test.benchtime 1000x
	step attention examples/gpt/cudnn 60 $spd examples_gpt_cudnn.test -test.run '^$' \
		-test.bench '^BenchmarkAttention$' -test.benchtime 200x
	grep -E 'workspaces' "$OUT/attention.log" 2>/dev/null
	step forwardbias gemm 45 $spd gemm.test -test.run '^$' \
		-test.bench '^BenchmarkForwardBias$' -test.benchtime 500x

	echo "==== 3. summary ($(date +%T), $(($(date +%s) - t0)) s)"
	results='^Benchmark[^[:space:]]*[[:space:]]+[0-9]+[[:space:]]' # a benchmark's result line
	{
		cat "$bin/commit"
		for s in kernels gemm cublaslt gpumodel cudnn gpumodel_cudnn \
			microbatch_small microbatch_1.3b fused attention forwardbias; do
			if [ -f "$OUT/$s.summary" ]; then
				n=$(grep -cE "$results" "$OUT/$s.log" 2>/dev/null)
				echo "$(head -1 "$OUT/$s.summary")$(tail -1 "$OUT/$s.summary" |
					sed -n 's/^ *\([0-9]* passed.*\)/; \1/p')$([ "${n:-0}" -gt 0 ] && echo "; $n benchmark results")"
			else
				echo "== $s: no summary"
			fi
		done
		echo "-- benchmarks"
		cat "$OUT"/microbatch_*.log "$OUT/fused.log" "$OUT/attention.log" "$OUT/forwardbias.log" 2>/dev/null |
			grep -E "$results" | tr -s ' \t' ' '
		echo "-- MicroBatch tokens/s over flash's"
		cat "$OUT"/microbatch_*.log 2>/dev/null | ratios tokens/s flash 1
		echo "-- FusedProducers: unfused gpu-us/op over each's"
		cat "$OUT/fused.log" 2>/dev/null | ratios gpu-us/op unfused 0
		echo "-- ForwardBias: TFLOP/s over float32's"
		cat "$OUT/forwardbias.log" 2>/dev/null | ratios TFLOP/s float32 1
		echo "-- Attention: flash's ms/op over each's (flash/split is the copy flash needs first)"
		cat "$OUT/attention.log" 2>/dev/null | ratios ms/op flash 0 1
		echo "== speed37.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES) ($(date +%T))"
	} | tee "$OUT/speed37_summary.txt"
	(cd "$OUT" && tar czf speed37_logs.tgz ./*.log ./*.summary && rm -f ./*.log ./*.summary)
	ls -l "$OUT"
	return $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*)
	echo "usage: $0 build|run" >&2
	exit 2
	;;
esac
