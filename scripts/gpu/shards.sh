#!/bin/sh
# shards.sh checks and times, in one call on a one-GPU machine, the update
# and cast launched once for every bucket (optimizer.ShardUpdater; issue
# 17's "one launch per step phase"):
#
#   sh scripts/gpu/shards.sh build   # here: binaries (xz) into $BIN
#   sh scripts/gpu/shards.sh run     # there (carry $BIN); logs into $OUT
#
# run:
#  1. concurrently (correctness only): internal/kernels (the update and
#     cast kernels' entries and PTX, tiles, moments, the control block),
#     optimizer/gpu whole (TestConformance with its new Shards cases:
#     UpdateShards and CastShards against the CPU's Update and Cast shard
#     by shard; TestStep, TestOverlap*, TestStepGraph, TestSharded*);
#  2. alone: BenchmarkStepShards (one launch against one per bucket, same
#     process: step time and StepAsync host time, current and tiles);
#  3. examples/multigpu, the 1.42B shape at d = 1, plain step per recipe,
#     this commit against the previous one ($OLD, built from git) in the
#     same call (current scaling; every recipe with OLD_ALL=1);
#  4. with NCU="<recipe>...": for each recipe, ncu of two steps of the
#     1.42B example at d = 1 (the kernels a step launches, their time and
#     DRAM bytes: ncu_<recipe>.csv), and ncustep.awk's summary of the last
#     step: update + amax + cast and the statistics against the floor of
#     their bytes at COPY_GBS (default 4270, the H200's measured copy).
# BIN defaults to .gpu-shards (ignored by git). Build options: PKGS (the
# test binaries' packages), MULTIGPU=0 (no example binaries: part 3 is
# skipped), OLD='' (no old example); run options: BENCH (the benchmark
# pattern of part 2; empty: skipped), PROFILE=1 (part 2 writes a CPU
# profile and an execution trace into $OUT), PLAIN=0 (part 3 skipped), NCU.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
. "$root/scripts/gpu/lib.sh" # tests, build_at, pack, stamp, unpack, t
bin=${BIN:-.gpu-shards}
old=${OLD-a6b1f89} # OLD='': no old binary

build() {
	set -e
	rm -rf "$bin"
	mkdir -p "$bin"
	tests ${PKGS:-internal/kernels optimizer/gpu collective/nccl}
	if [ "${MULTIGPU:-1}" = 1 ]; then
		export CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations" # go-nvml's header
		go build -ldflags="-s -w" -o "$bin/multigpu" ./examples/multigpu
		[ -z "$old" ] || build_at "$old" examples/multigpu multigpu.old
	fi
	pack $(cd "$bin" && ls *.test multigpu* 2>/dev/null)
	stamp "old: $old"
}

run() {
	set +e
	unpack
	status=0
	echo "== 1. correctness, concurrently ($(date +%T))"
	pids=""
	[ -f "$bin/internal_kernels.test" ] && { t kernels internal/kernels 150 internal_kernels.test -test.run "$kernels_run" & pids="$pids $!"; }
	[ -f "$bin/optimizer_gpu.test" ] && { t optimizer optimizer/gpu 300 optimizer_gpu.test & pids="$pids $!"; }
	[ -f "$bin/collective_nccl.test" ] && { t nccl collective/nccl 150 collective_nccl.test & pids="$pids $!"; }
	[ -f "$bin/examples_gpt_model.test" ] && { t model examples/gpt/model 150 examples_gpt_model.test -test.run GPU & pids="$pids $!"; }
	for p in $pids; do wait $p || status=1; done
	cat "$OUT"/*.summary
	if [ -f "$bin/optimizer_gpu.test" ] && [ "${BENCH-x}" != "" ]; then
		echo "== 2. BenchmarkStepShards ($(date +%T))"
		prof=""
		[ "${PROFILE:-0}" = 1 ] && prof="-test.cpuprofile $OUT/stepshards.cpu -test.trace $OUT/stepshards.trace"
		# shellcheck disable=SC2086 # $prof holds flags
		(cd optimizer/gpu && timeout 280 "$root/$bin/optimizer_gpu.test" -test.run '^$' -test.bench "${BENCH:-StepShards}" -test.benchtime 10x $prof) \
			>"$OUT/stepshards.log" 2>&1 || status=1
		grep -E '^(Benchmark|ok|FAIL|---)' "$OUT/stepshards.log"
	fi
	plain=$([ -f "$bin/multigpu" ] && [ "${PLAIN:-1}" = 1 ] && echo current delayed tile block mx)
	[ -n "$plain" ] && echo "== 3. multigpu 1.42B d = 1, plain step, this commit and $old ($(date +%T))"
	port=29600
	for r in $plain; do
		for v in multigpu multigpu.old; do
			[ -f "$bin/$v" ] || continue
			[ $v = multigpu.old ] && [ $r != current ] && [ "${OLD_ALL:-}" = "" ] && continue
			port=$((port + 1)) # one rank, without the launcher (its binary would not fit the transfer)
			RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
				timeout 100 "$bin/$v" -recipe $r -steps 5 -plain-steps 5 -timeout 95s \
				-out "$OUT/step_${v}_$r" >"$OUT/step_${v}_$r.log" 2>&1 || status=1
			echo "-- $v $r: $(grep -E 'plain' "$OUT/step_${v}_$r.log" | head -2 | tr '\n' ' ')"
			grep -E 'reduce_scatter|rror|panic' "$OUT/step_${v}_$r.log" | head -3
		done
	done
	for r in ${NCU:-}; do
		echo "== 4. ncu of the step, $r ($(date +%T))"
		RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 1)) \
			timeout 150 /usr/local/cuda/bin/ncu --clock-control none --cache-control none -k 'regex:update|cast|grad_stats|scales|step_control|amax' \
			--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw --print-units base \
			"$bin/multigpu" -recipe "$r" -warmup 1 -steps 0 -plain-steps 1 -timeout 140s >"$OUT/ncu_$r.csv" 2>"$OUT/ncu_$r.err" || status=1
		port=$((port + 1))
		awk -F'","' -v copy="${COPY_GBS:-4270}" -f scripts/gpu/ncustep.awk "$OUT/ncu_$r.csv" || status=1
	done
	echo "== shards.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES) ($(date +%T))"
	(cd "$OUT" && tar czf shards_logs.tgz ./*.log ./*.csv ./*.err ./step_* 2>/dev/null && rm -rf ./*.log ./*.csv ./*.summary ./*.err ./step_*)
	return $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
