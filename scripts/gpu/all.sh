#!/bin/sh
# all.sh builds (here) and runs (on the 2-GPU machine, in ONE device call)
# the whole GPU suite and the benchmarks that back the README's figures:
#
#   scripts/gpu/all.sh build   # build machine: .gpu/ packed into .gpu-all/all.tgz
#   scripts/gpu/all.sh run     # GPU machine, carry [".gpu-all"]; one file back: $OUT/all.tgz
#
# run: 1. the suite (scripts/gpu/run.sh: every GPU test binary with
# DISTOPT_REQUIRE_GPU=1, including the two-process NCCL step test and the
# gorgonia interop test when it was built), then the fused update benchmark
# and its PyTorch baseline; 2. the multi-GPU example against the PyTorch
# ZeRO-1 baseline (scripts/gpu/multigpu.sh). Logs, JSON and charts are
# packed into one archive, since the device tool returns few files.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)

case "${1:-}" in
build)
	set -e
	rm -rf .gpu .gpu-all
	sh scripts/gpu/build.sh
	sh scripts/gpu/build_interop.sh || true
	sh scripts/gpu/multigpu.sh build
	# Packed (the carried files must stay under 64 MiB).
	mkdir -p .gpu-all
	tar czf .gpu-all/all.tgz .gpu
	du -sh .gpu .gpu-all/all.tgz
	;;
run)
	if [ -f .gpu-all/all.tgz ]; then tar xzf .gpu-all/all.tgz; fi
	dst=${OUT:-$root/.gpu/out}
	mkdir -p "$dst"
	work=/tmp/distopt-all
	rm -rf $work && mkdir -p $work/suite $work/multigpu
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
	status=0
	OUT=$work/suite BENCH=0 TIMEOUT=${SUITE_TIMEOUT:-6m} timeout ${SUITE_SECONDS:-330} sh scripts/gpu/run.sh || status=1
	# The fused update benchmark and its baseline (run.sh runs them only with BENCH=1).
	timeout 90 .gpu/bin/distopt-bench-update >$work/suite/bench-update.md 2>&1 || status=1
	timeout 90 python3 scripts/bench/torch_adamw.py >$work/suite/bench-torch.md 2>&1 || status=1
	cat $work/suite/bench-update.md $work/suite/bench-torch.md
	OUT=$work/multigpu timeout ${MULTI_SECONDS:-240} sh scripts/gpu/multigpu.sh run || status=1
	tar czf "$dst/all.tgz" -C /tmp distopt-all
	echo "== all.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES)"
	exit $status
	;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
