#!/bin/sh
# optimizer.sh (run on the GPU machine, from the repository root) runs the
# CUDA backend's tests (conformance suite, full steps against the CPU
# backend), the kernel tests, the fused update benchmark and the PyTorch
# baseline, from binaries built here into $BIN (default .bench/opt):
#   mkdir -p .bench/opt
#   go test -c -o .bench/opt/optimizer_gpu.test ./optimizer/gpu
#   go test -c -o .bench/opt/internal_kernels.test ./internal/kernels
#   go build -o .bench/opt/distopt-bench-update ./cmd/distopt-bench-update
# Logs go to $OUT (or .bench/opt/out).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=${BIN:-.bench/opt}
out=${OUT:-$root/$bin/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DISTOPT_REQUIRE_GPU=1
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv >"$out/env.txt" 2>&1
(cd optimizer/gpu && timeout 200 "$root/$bin/optimizer_gpu.test" -test.v) >"$out/optimizer_gpu.log" 2>&1 || status=1
tail -3 "$out/optimizer_gpu.log"; grep -E '^\s*--- FAIL' "$out/optimizer_gpu.log" | head -20
grep -E -A3 '^\s*--- FAIL' "$out/optimizer_gpu.log" | grep -v -- '--- ' | head -30
(cd internal/kernels && timeout 120 "$root/$bin/internal_kernels.test" -test.v) >"$out/internal_kernels.log" 2>&1 || status=1
tail -2 "$out/internal_kernels.log"
timeout 90 "$root/$bin/distopt-bench-update" >"$out/bench-update.md" 2>&1 || status=1
cat "$out/bench-update.md"
py=python3
for p in python3 /opt/venv/bin/python /usr/local/bin/python3; do
	if "$p" -c 'import torch' 2>/dev/null; then py=$p; break; fi
done
timeout 90 "$py" scripts/bench/torch_adamw.py >"$out/bench-torch.md" 2>&1 || status=1
cat "$out/bench-torch.md"
echo "== optimizer.sh: status $status"
exit $status
