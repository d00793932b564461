#!/bin/sh
# nccl.sh builds (here) and runs (on the 2-GPU machine) the NCCL part of the
# GPU suite and the collective benchmarks of issue 6.
#
#   scripts/gpu/nccl.sh build   # on the build machine: binaries into .gpu/nccl/
#   scripts/gpu/nccl.sh run     # on the GPU machine (carry .gpu/nccl.tgz), logs to $OUT
#
# run: the test binaries of internal/nccl, collective/nccl and tests (the
# multi-process and fault tests) with DISTOPT_REQUIRE_GPU=1, then
# distopt-ncclbench and scripts/bench/torch_collectives.py on the same GPUs,
# and scripts/bench/compare_collectives.py over both; distopt-ncclbench runs
# a second time under the launcher (distopt run) on PyTorch's own NCCL. NVLink multicast stays
# off everywhere (NCCL_NVLS_ENABLE=0). Environment: STAGES (default
# "tests bench"), TEST_TIMEOUT (per binary, default 200 s).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=.gpu/nccl

build() {
	set -e
	mkdir -p $bin
	go test -c -ldflags="-s -w" -o $bin/internal_nccl.test ./internal/nccl
	go test -c -ldflags="-s -w" -o $bin/collective_nccl.test ./collective/nccl
	go test -race -c -ldflags="-s -w" -o $bin/collective_nccl_race.test ./collective/nccl
	go test -c -ldflags="-s -w" -o $bin/tests.test ./tests
	go build -ldflags="-s -w" -o $bin/distopt-ncclbench ./cmd/distopt-ncclbench
	go build -ldflags="-s -w" -o $bin/distopt ./cmd/distopt
	{
		git rev-parse HEAD
		git status --porcelain --untracked-files=no | sed 's/^/modified: /'
		date -u +%Y-%m-%dT%H:%M:%SZ
	} >$bin/commit
	# Packed for the trip (the carried files must stay under 64 MiB).
	tar czf .gpu/nccl.tgz -C .gpu nccl
	du -sh $bin .gpu/nccl.tgz
}

run() {
	if [ -f .gpu/nccl.tgz ]; then tar xzf .gpu/nccl.tgz -C .gpu; fi
	out=${OUT:-$root/$bin/out}
	mkdir -p "$out"
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
	export DISTOPT_REQUIRE_GPU=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	{
		echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		echo "== built from:"; cat $bin/commit
		echo "== host: $(uname -a), $(nproc) cpus"
		nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv 2>&1
		echo "== topology"; nvidia-smi topo -m 2>&1
		echo "== libnccl:"; ldconfig -p 2>&1 | grep libnccl
		echo "== cc: $(command -v cc gcc | head -1)"
	} >"$out/env.txt" 2>&1
	cat "$out/env.txt"
	status=0
	for stage in ${STAGES:-tests bench}; do
		case $stage in
		tests)
			for t in internal_nccl:internal/nccl collective_nccl:collective/nccl collective_nccl_race:collective/nccl tests:tests; do
				name=${t%%:*} dir=${t#*:}
				echo "=== $name" | tee -a "$out/tests.log"
				(cd "$dir" && timeout "${TEST_TIMEOUT:-200}" "$root/$bin/$name.test" -test.v -test.timeout 10m) >>"$out/tests.log" 2>&1
				rc=$?
				echo "=== $name: exit $rc" | tee -a "$out/tests.log"
				[ $rc -eq 0 ] || status=1
			done
			grep -E '^(--- FAIL|FAIL|panic|ok|PASS)|^=== [a-z_]+: exit' "$out/tests.log" | tail -40
			;;
		bench)
			# distopt on the system's NCCL, PyTorch on its own (bundled) NCCL,
			# and distopt again on PyTorch's NCCL (NCCL_LIBRARY).
			timeout 150 $bin/distopt-ncclbench -nproc 2 -trials 5 -json "$out/distopt.json" 2>&1 | tee "$out/bench.log" || status=1
			timeout 200 torchrun --standalone --nproc-per-node 2 scripts/bench/torch_collectives.py \
				--trials 5 --json "$out/torch.json" 2>&1 | tee -a "$out/bench.log" || status=1
			tnccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
			if [ -n "$tnccl" ] && [ -f "$tnccl" ]; then
				# this one under the launcher: distopt run sets the ranks' environment
				NCCL_LIBRARY=$tnccl timeout 150 $bin/distopt run --nproc-per-node 2 -- $bin/distopt-ncclbench -trials 5 \
					-json "$out/distopt_torchnccl.json" 2>&1 | tee -a "$out/bench.log" || status=1
			fi
			{
				echo "## distopt (system NCCL) vs PyTorch (its NCCL)"
				python3 scripts/bench/compare_collectives.py "$out/distopt.json" "$out/torch.json"
				if [ -f "$out/distopt_torchnccl.json" ]; then
					echo; echo "## distopt on PyTorch's NCCL ($tnccl) vs PyTorch"
					python3 scripts/bench/compare_collectives.py "$out/distopt_torchnccl.json" "$out/torch.json"
				fi
			} | tee "$out/compare.md"
			;;
		esac
	done
	echo "== nccl.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES)"
	return $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
