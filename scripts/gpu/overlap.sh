#!/bin/sh
# overlap.sh (run on the GPU machine, from the repository root) runs the
# overlapped pipeline's GPU checks from binaries built here into $BIN
# (default .gpu-overlap):
#   mkdir -p .gpu-overlap
#   go test -c -o .gpu-overlap/optimizer_gpu.test ./optimizer/gpu
#   go test -c -o .gpu-overlap/internal_kernels.test ./internal/kernels
# On one GPU: the scales kernel against fp8.ScaleFromAmax, the overlapped
# step against the synchronous step and the CPU backend (one-rank NCCL),
# the host-wait counts of GradReady and WaitParam, the GPU step against the
# CPU (device-derived scales), then BenchmarkStepAsync (host time and host
# syncs per step). On two GPUs also TestNCCLStep and TestNCCLOverlap (they
# skip on one, or fail under DISTOPT_REQUIRE_GPU=1: set REQUIRE=0 there).
# Logs go to $OUT (or $BIN/out).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=${BIN:-.gpu-overlap}
out=${OUT:-$root/$bin/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DISTOPT_REQUIRE_GPU=${REQUIRE:-1} NCCL_NVLS_ENABLE=0
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv >"$out/env.txt" 2>&1
cat "$bin/commit" >>"$out/env.txt" 2>/dev/null
(cd internal/kernels && timeout 120 "$root/$bin/internal_kernels.test" -test.v -test.run 'TestScalesFromAmax|TestEntries') \
	>"$out/kernels.log" 2>&1 || status=1
tail -2 "$out/kernels.log"
tests='TestOverlapStep|TestOverlapNoHostWait|TestStep$'
[ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] && tests="$tests|TestNCCLStep|TestNCCLOverlap"
(cd optimizer/gpu && timeout 400 "$root/$bin/optimizer_gpu.test" -test.v -test.run "$tests") >"$out/optimizer_gpu.log" 2>&1 || status=1
grep -E '^(--- |ok|PASS|FAIL)|StepAsync waited' "$out/optimizer_gpu.log" | head -40
grep -E -A3 '^\s*--- FAIL' "$out/optimizer_gpu.log" | head -30
(cd optimizer/gpu && timeout 200 "$root/$bin/optimizer_gpu.test" -test.run '^$' -test.bench StepAsync -test.benchtime 20x) \
	>"$out/bench.log" 2>&1 || status=1
cat "$out/bench.log"
echo "== overlap.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES)"
exit $status
