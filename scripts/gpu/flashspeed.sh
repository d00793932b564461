#!/bin/sh
# flashspeed.sh builds (here) and runs (on a GPU machine) the checks and
# the benchmark of every variant of the fused attention kernels
# (examples/gpt/kernels/flash.cu and flashalt.cu: ldmatrix, pipe, wide, ds; issue 16).
#
#   scripts/gpu/flashspeed.sh build   # build machine: the examples/gpt/kernels test
#                                     # binary, xz-compressed, into $BIN
#                                     # (default /work/main/.gpu-flashspeed), and
#                                     # this script as $BIN/run.sh
#   sh .gpu-flashspeed/run.sh         # GPU machine, from the root of a checkout;
#                                     # log to $OUT/flashspeed.log
#
# run, GPU required (no skips), well under two minutes:
#  1. TestFlash* and TestLibrary with DISTOPT_REQUIRE_GPU=1 (-test.short: the
#     CPU lane model runs its short cases only; TestFlashTilesMatchSource,
#     which reads this branch's flash.cu, is left to the build machine, as
#     the run is in a checkout of main): every variant's kernels
#     against the float64 reference at D 64/128 and ragged seq, a repeat run
#     equal to the bit, guard columns, and the same bits across variants;
#  2. BenchmarkFlashKernels -test.benchtime 20x: every variant of each tile
#     kernel and the launchers' defaults at the 124M and 1.3B shapes;
#  3. Nsight Compute, when the machine has it: a few metrics (time,
#     registers, occupancy limits, tensor pipe, shared-memory wavefronts
#     and bank conflicts) of the D = 128 kernels of the 1.3B benchmark, as
#     "kernel | metric | value" lines (--page details; the first run's raw
#     page cut the metrics off; this form not yet run); information only,
#     not part of the status;
#  4. TestFlashAttention (sm90 set) under compute-sanitizer memcheck
#     (cp.async and ldmatrix addresses), when the machine has it; its
#     verdict is its own line ("flashspeed memcheck: ..."), not part of the
#     status.
set -u
bin=${BIN:-/work/main/.gpu-flashspeed}

build() {
	set -e
	cd "$(dirname "$0")/../.."
	mkdir -p "$bin"
	rm -f "$bin"/*.test "$bin"/*.xz "$bin"/READY "$bin"/READY2
	go test -c -ldflags="-s -w" -o "$bin/kernels.test" ./examples/gpt/kernels
	xz -9 "$bin/kernels.test"
	git rev-parse HEAD >"$bin/commit"
	cp scripts/gpu/flashspeed.sh "$bin/run.sh"
	du -sh "$bin"
}

run() {
	set +e
	bin=.gpu-flashspeed
	root=$(pwd)
	export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
	log=${OUT:-.}/flashspeed.log
	xz -dkf $bin/kernels.test.xz
	chmod +x $bin/kernels.test
	status=0
	{
		nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
		echo "built from $(cat $bin/commit)"
		(cd examples/gpt/kernels && DISTOPT_REQUIRE_GPU=1 "$root/$bin/kernels.test" -test.v -test.short -test.timeout 100s \
			-test.run 'Flash|^TestLibrary$' -test.skip 'TestFlashTilesMatchSource') || status=1
		# every variant from its PTX through the driver's JIT, as flash (the
		# model's variants) is loaded; flashalt otherwise loads ptxas's code
		(cd examples/gpt/kernels && DISTOPT_CUDA_PTX=1 DISTOPT_REQUIRE_GPU=1 "$root/$bin/kernels.test" -test.run XXX -test.timeout 60s \
			-test.benchtime 20x -test.bench 'BenchmarkFlashKernels') || status=1
		ncu=/usr/local/cuda/bin/ncu
		if [ -x $ncu ]; then
			echo "flashspeed ncu (1.3B shape, two launches of each kernel):"
			(cd examples/gpt/kernels && DISTOPT_REQUIRE_GPU=1 timeout 45 $ncu -k 'regex:flash_(fwd|bwd_dkdv|bwd_dq)_d128' --launch-count 40 \
				--csv --page details --print-units base --metrics \
				gpu__time_duration.sum,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,smsp__inst_executed.avg.per_cycle_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
				"$root/$bin/kernels.test" -test.run XXX -test.bench 'BenchmarkFlashKernels/1.3B/(fwd|dkdv|dq)/' \
				-test.benchtime 1x 2>&1 | grep -v '^==PROF==' | awk -F'","' 'NF > 4 {print $5 " | " $(NF-2) " | " $NF}' | head -200) || echo "flashspeed ncu: failed"
		fi
		san=/usr/local/cuda/bin/compute-sanitizer
		if [ -x $san ]; then
			if (cd examples/gpt/kernels && DISTOPT_REQUIRE_GPU=1 timeout 35 $san --tool memcheck --error-exitcode 3 \
				"$root/$bin/kernels.test" -test.short -test.run 'TestFlashAttention$/sm90/' >"$root/$bin/memcheck.txt" 2>&1); then
				echo "flashspeed memcheck: ok"
			else
				echo "flashspeed memcheck: FAILED (exit $?: 3 = memcheck errors, 124 = timeout)"
				grep -v '^=== RUN\|^    --- PASS\|^--- PASS\|^    flash_test' "$root/$bin/memcheck.txt" | head -40
			fi
		else
			echo "flashspeed: no compute-sanitizer at $san; memcheck skipped"
		fi
		echo "flashspeed status: $status"
	} >"$log" 2>&1
	cat "$log"
	exit $status
}

# As $BIN/run.sh without an argument it runs.
case "${1:-$(basename "$0" .sh)}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
