#!/bin/sh
# devstep.sh checks the step control block on one GPU (issue 15's step the
# host does not wait on). Two halves, one script:
#
#   sh scripts/gpu/devstep.sh build      # here: test binaries into $BIN
#   sh scripts/gpu/devstep.sh            # there, from the repository root
#
# BIN defaults to .gpu-devstep (git ignores it; carry it to the GPU
# machine: the binaries are gzipped, 17 MB). The run, in well under three
# minutes on an H200:
#   - internal/kernels: the control kernel against backend.Control.Advance
#     on every bit and on ties of the rounding to float64 (TestStepControl),
#     every launcher's kernel defined (TestEntries), the scales and
#     tile-cast kernels with their new control argument (the delayed
#     scales kernel is checked through TestConformance);
#   - optimizer/gpu TestConformance: the CPU reference against the GPU byte
#     for byte, now with Control (the control kernel against
#     backend.Control.Advance) and Controlled (update, cast and scales with
#     a control block: the block's gradient scale, nothing written when
#     skipped; DelayedScales against fp8.AmaxHistory);
#   - the overlap tests: the overlapped (deferred-decision) step against the
#     synchronous one and the CPU, with a skipped step, and the host-wait
#     counts (TestOverlapNoHostWait: StepAsync waits 0 times, current and
#     delayed scaling);
#   - TestStepGraph: one step captured in a CUDA graph and launched, against
#     the same step uncaptured, every recipe, taken and skipped;
#   - BenchmarkStepAsync: host time and host syncs per step (sync, async,
#     async-idle, graph).
# Logs go to $OUT (or $BIN/out). Exit status 0 when everything passed.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=${BIN:-.gpu-devstep}
if [ "${1:-}" = build ]; then
	set -e
	mkdir -p "$bin"
	go test -c -ldflags="-s -w" -o "$bin/optimizer_gpu.test" ./optimizer/gpu
	go test -c -ldflags="-s -w" -o "$bin/internal_kernels.test" ./internal/kernels
	gzip -f -9 "$bin/optimizer_gpu.test" "$bin/internal_kernels.test" # the carry limit is 64 MiB
	git rev-parse HEAD >"$bin/commit"
	git status --short | head -5 >>"$bin/commit"
	du -sh "$bin"
	exit 0
fi
exe=$(mktemp -d) # the binaries, unpacked
trap 'rm -rf "$exe"' EXIT
for t in optimizer_gpu internal_kernels; do
	gunzip -c "$bin/$t.test.gz" >"$exe/$t.test" && chmod +x "$exe/$t.test" || { echo "devstep.sh: $bin/$t.test.gz missing: run 'sh scripts/gpu/devstep.sh build' first"; exit 2; }
done
out=${OUT:-$root/$bin/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DISTOPT_REQUIRE_GPU=${REQUIRE:-1} NCCL_NVLS_ENABLE=0
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv >"$out/env.txt" 2>&1
cat "$bin/commit" >>"$out/env.txt" 2>/dev/null
(cd internal/kernels && timeout 60 "$exe/internal_kernels.test" -test.v -test.run 'TestEntries|TestScalesFromAmax|TestTile|TestStepControl') \
	>"$out/kernels.log" 2>&1 || status=1
grep -E '^(--- FAIL|ok|PASS|FAIL)' "$out/kernels.log" | head -20
run() { # name timeout pattern
	(cd optimizer/gpu && timeout "$2" "$exe/optimizer_gpu.test" -test.v -test.run "$3") >"$out/$1.log" 2>&1 || status=1
	echo "== $1"
	grep -E '^(--- |ok|PASS|FAIL)' "$out/$1.log" | grep -v '^    ' | head -20
	grep -E -A4 '^\s*--- FAIL' "$out/$1.log" | head -40
}
run conformance 90 'TestConformance'
run overlap 90 'TestOverlapStep|TestOverlapNoHostWait|TestStep$'
run graph 60 'TestStepGraph'
(cd optimizer/gpu && timeout 120 "$exe/optimizer_gpu.test" -test.run '^$' -test.bench StepAsync -test.benchtime 20x) \
	>"$out/bench.log" 2>&1 || status=1
cat "$out/bench.log"
echo "== devstep.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES)"
exit $status
