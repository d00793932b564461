#!/bin/sh
# lanes.sh checks, in one call on a one-GPU machine, the communicator's
# lane and the step enqueued in one hand-over (optimizer.Batcher) with
# every GPU suite that drives NCCL, together with the update kernels, and
# times the step's host time and the update kernels of this commit against
# $OLD:
#
#   sh scripts/gpu/lanes.sh build   # here: binaries (xz) into $BIN
#   sh scripts/gpu/lanes.sh run     # there (carry $BIN); logs into $OUT
#
# run:
#  1. concurrently (correctness only): internal/cuda whole (lanes, words,
#     stream values), internal/kernels (entries, PTX, moments, control
#     block, accumulation), collective/nccl and optimizer/gpu whole;
#  2. distopt-bench-update's moment table, this commit and $OLD, two rounds;
#  3. BenchmarkStepShards (current, one launch) and BenchmarkStepAsync:
#     StepAsync's host time and hand-overs.
# BIN defaults to .gpu-lanes (ignored by git), OLD to 605c1fe. Build
# options: PKGS (the test binaries' packages), UPDATE=0 (no bench-update:
# part 2 skipped); run options: KERNELS (internal/kernels' -test.run,
# default lib.sh's kernels_run), OPTRUN (optimizer/gpu's -test.run), BENCH
# (part 3's pattern; empty: skipped).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=${BIN:-.gpu-lanes}
old=${OLD:-605c1fe}
. scripts/gpu/lib.sh

build() {
	set -e
	rm -rf "$bin"
	mkdir -p "$bin"
	tests ${PKGS:-internal/cuda internal/kernels collective/nccl optimizer/gpu}
	if [ "${UPDATE:-1}" = 1 ]; then
		go build -ldflags="-s -w" -o "$bin/bench-update" ./cmd/distopt-bench-update
		build_at "$old" cmd/distopt-bench-update bench-update.old
	fi
	pack $(cd "$bin" && ls *.test bench-update* 2>/dev/null)
	stamp "old: $old"
}

run() {
	set +e
	unpack
	status=0
	echo "== 1. correctness, concurrently ($(date +%T))"
	pids=""
	has() { [ -f "$bin/$1" ]; }
	has internal_cuda.test && { t cuda internal/cuda 120 internal_cuda.test & pids="$pids $!"; }
	has internal_kernels.test && { t kernels internal/kernels 200 internal_kernels.test -test.run "${KERNELS:-$kernels_run}" & pids="$pids $!"; }
	has collective_nccl.test && { t nccl collective/nccl 150 collective_nccl.test & pids="$pids $!"; }
	has optimizer_gpu.test && { t optimizer optimizer/gpu 240 optimizer_gpu.test ${OPTRUN:+-test.run "$OPTRUN"} & pids="$pids $!"; }
	for p in $pids; do wait $p || status=1; done
	cat "$OUT"/*.summary
	has bench-update && echo "== 2. update kernels, moment table, this commit and $old ($(date +%T))"
	for round in $(has bench-update && echo 1 2); do
		for b in bench-update bench-update.old; do
			echo "-- $b (round $round)"
			timeout 60 "$root/$bin/$b" -tables moments 2>&1 | grep -E '^\| |copy of'
		done
	done
	if has optimizer_gpu.test && [ "${BENCH-x}" != "" ]; then
		echo "== 3. BenchmarkStepShards, BenchmarkStepAsync ($(date +%T))"
		(cd optimizer/gpu && timeout 200 "$root/$bin/optimizer_gpu.test" -test.run '^$' \
			-test.bench "${BENCH:-StepShards/current/shards/async|StepAsync}" -test.benchtime 10x) \
			>"$OUT/stepshards.log" 2>&1 || status=1
		grep -E '^(Benchmark|ok|FAIL|---)' "$OUT/stepshards.log"
	fi
	echo "== lanes.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES) ($(date +%T))"
	(cd "$OUT" && tar czf lanes_logs.tgz ./*.log && rm -f ./*.log)
	return $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
