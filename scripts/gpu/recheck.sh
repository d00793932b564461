#!/bin/sh
# recheck.sh runs, in one call on a one-GPU machine, what changed after the
# previous GPU call and was checked on the CPU only (the list is in
# scripts/gpu/NOTES.md, "Waiting for a GPU"), plus issue 18's one-GPU NVML
# check of sharded gradients (the GPT example's FP8-gradient smoke is part
# fp8grad of gpt_long.sh).
#
#   sh scripts/gpu/recheck.sh build   # here: binaries (xz) into $BIN
#   sh scripts/gpu/recheck.sh run     # there (carry $BIN); logs into $OUT
#
# run:
#  1. concurrently on the one GPU (correctness only, nothing timed):
#     examples/gpt/kernels TestFlash* (every variant with the final per-pass
#     defaults), internal/cuda (TestGraphCapture and the rest, also under
#     -race), optimizer/gpu (TestStepGraph, the overlap tests, TestStep,
#     TestConformance), collective/nccl;
#  2. alone: BenchmarkStepAsync (host time and host syncs per step);
#  3. examples/multigpu at d = 1 with sharded gradients and 8-bit moments
#     (synthetic gradients, the 1.42B shape): NVML per rank against the
#     planner's prediction.
# BIN defaults to .gpu-recheck (ignored by git).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
. "$root/scripts/gpu/lib.sh" # tests, pack, stamp, unpack, t
bin=${BIN:-.gpu-recheck}

build() {
	set -e
	rm -rf "$bin"
	mkdir -p "$bin"
	tests examples/gpt/kernels internal/cuda optimizer/gpu collective/nccl
	go test -race -c -o "$bin/internal_cuda.race.test" ./internal/cuda
	export CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations" # go-nvml's header
	go build -ldflags="-s -w" -o "$bin/distopt" ./cmd/distopt
	go build -ldflags="-s -w" -o "$bin/multigpu" ./examples/multigpu
	pack $(cd "$bin" && ls *.test) distopt multigpu
	stamp
}

run() {
	set +e
	unpack
	status=0
	echo "== 1. correctness, concurrently"
	t kernels examples/gpt/kernels 200 examples_gpt_kernels.test -test.run 'TestFlash' &
	p1=$!
	t cuda internal/cuda 120 internal_cuda.test &
	p2=$!
	t cuda_race internal/cuda 150 internal_cuda.race.test -test.run 'TestGraphCapture|TestStream' &
	p3=$!
	t optimizer optimizer/gpu 200 optimizer_gpu.test -test.run 'TestStepGraph|TestOverlap|TestStep$|TestConformance|TestGraph' &
	p4=$!
	t nccl collective/nccl 120 collective_nccl.test &
	p5=$!
	for p in $p1 $p2 $p3 $p4 $p5; do wait $p || status=1; done
	cat "$OUT"/*.summary
	echo "== 2. BenchmarkStepAsync"
	(cd optimizer/gpu && timeout 120 "$root/$bin/optimizer_gpu.test" -test.run '^$' -test.bench StepAsync -test.benchtime 20x) \
		>"$OUT/stepasync.log" 2>&1 || status=1
	grep -E '^(Benchmark|ok|FAIL|---)' "$OUT/stepasync.log"
	echo "== 3. multigpu d = 1, sharded gradients, 8-bit moments: NVML against the planner"
	for m in fp8,bf16 fp8; do
		timeout 150 "$bin/distopt" run --nproc-per-node 1 -- "$bin/multigpu" -sharded-grads -moments "$m" -steps 3 -plain-steps 3 \
			>"$OUT/multigpu_$m.log" 2>&1 || status=1
		grep -i -E 'nvml|predict|bytes/param|error|panic' "$OUT/multigpu_$m.log" | head -8
	done
	echo "== recheck.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES)"
	(cd "$OUT" && tar czf recheck_logs.tgz ./*.log && rm -f ./*.log ./*.summary)
	return $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
