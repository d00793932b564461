#!/bin/sh
# multigpu.sh builds (here) and runs (on the GPU machine) the multi-GPU
# example of issue 7 and its PyTorch ZeRO-1 baseline, in one device call.
#
#   scripts/gpu/multigpu.sh build   # build machine: binaries into .gpu/multigpu/
#   scripts/gpu/multigpu.sh run     # GPU machine (carry .gpu/multigpu); files to $OUT
#
# run, with N the largest of NPROCS (default "2 1"; "8 4 2 1" on 8 GPUs):
#   1. scripts/bench/torch_zero1.py on N GPUs (torchrun)          -> $OUT/torchN.json
#   2. examples/multigpu on N GPUs under 'distopt run', compared
#      with step 1's JSON, charts and summary                     -> $OUT/dN/
#   3. examples/multigpu on each other size of NPROCS             -> $OUT/others.json
# and everything printed -> $OUT/run.log. That is 7 files at most, within
# what the device tool brings back (8). Both sides use the same NCCL: the
# one inside PyTorch's wheel when present (NCCL_LIBRARY), else the system's.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends).
#
# Environment: NPROCS, MODEL_FLAGS (flags of both programs' model, default
# the GPT13B shape), STEPS (default 20), PLAIN_STEPS (default 10), SMOKE
# (default 1: first a few steps of a small model, to the log only).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=.gpu/multigpu

build() {
	set -e
	mkdir -p $bin
	export CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations" # go-nvml's header
	go build -ldflags="-s -w" -o $bin/distopt ./cmd/distopt
	go build -ldflags="-s -w" -o $bin/multigpu ./examples/multigpu
	{
		git rev-parse HEAD
		git status --porcelain --untracked-files=no | sed 's/^/modified: /'
		date -u +%Y-%m-%dT%H:%M:%SZ
	} >$bin/commit
	du -sh $bin
}

run() {
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
	export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	nprocs=${NPROCS:-2 1}
	n=$(echo $nprocs | tr ' ' '\n' | sort -n | tail -1)
	model=${MODEL_FLAGS:-}
	steps="-steps ${STEPS:-20} -plain-steps ${PLAIN_STEPS:-10}"
	tsteps="--steps ${STEPS:-20} --plain-steps ${PLAIN_STEPS:-10}"
	tnccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
	if [ -n "$tnccl" ] && [ -f "$tnccl" ]; then export NCCL_LIBRARY=$tnccl; fi
	echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "== built from:"; cat $bin/commit
	echo "== host: $(uname -r), $(nproc) cpus; NCCL_LIBRARY=${NCCL_LIBRARY:-system}"
	nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,pci.bus_id --format=csv
	nvidia-smi topo -m
	status=0

	if [ "${SMOKE:-1}" = 1 ]; then
		echo "== 0. smoke: a small model on $n GPUs"
		timeout 60 $bin/distopt run --nproc-per-node "$n" -- $bin/multigpu -layers 2 -hidden 256 -ffn 1024 -vocab 1000 \
			-positions 128 -warmup 1 -steps 2 -plain-steps 1 -timeout 50s || status=1
	fi

	echo "== 1. PyTorch ZeRO-1 baseline on $n GPUs"
	# shellcheck disable=SC2086 # MODEL_FLAGS holds several flags
	timeout 150 torchrun --standalone --nproc-per-node "$n" scripts/bench/torch_zero1.py $(echo "$model" | sed 's/-\([a-z]\)/--\1/g') \
		$tsteps --json "$out/torch$n.json" || status=1

	echo "== 2. distopt on $n GPUs"
	# shellcheck disable=SC2086
	timeout 200 $bin/distopt run --nproc-per-node "$n" -- $bin/multigpu $model $steps -timeout 190s \
		-out "$out/d$n" -baseline "$out/torch$n.json" || status=1

	others=""
	for k in $nprocs; do
		[ "$k" = "$n" ] && continue
		echo "== 3. distopt on $k GPU(s)"
		# shellcheck disable=SC2086
		timeout 150 $bin/distopt run --nproc-per-node "$k" -- $bin/multigpu $model $steps -timeout 140s \
			-out "/tmp/multigpu-d$k" || status=1
		others="$others /tmp/multigpu-d$k/summary.json"
	done
	if [ -n "$others" ]; then
		# shellcheck disable=SC2086
		python3 -c 'import json, sys; json.dump([json.load(open(p)) for p in sys.argv[2:]], open(sys.argv[1], "w"), indent=1)' \
			"$out/others.json" $others || status=1
	fi
	nvidia-smi --query-gpu=index,memory.used --format=csv
	echo "== multigpu.sh: $([ $status -eq 0 ] && echo all ran || echo FAILURES)"
	return $status
}

case "${1:-}" in
build) build ;;
run)
	out=${OUT:-$root/$bin/out}
	mkdir -p "$out"
	{ run; echo $? >/tmp/multigpu.status; } 2>&1 | tee "$out/run.log"
	exit "$(cat /tmp/multigpu.status)"
	;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
