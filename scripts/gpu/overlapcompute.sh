#!/bin/sh
# overlapcompute.sh builds (here) and runs (on the GPU machine) issue 15's
# measurement of exposed communication: examples/multigpu -compute gemm
# (every linear layer's FP8 GEMMs of the 1.3B GPT shape with the optimizer's
# overlapped pipeline) and its PyTorch baseline scripts/bench/torch_overlap.py
# (torch._scaled_mm of the same shapes, async NCCL collectives).
#
#   scripts/gpu/overlapcompute.sh build   # build machine: into $BIN (default .gpu-overlapcompute/)
#   sh $BIN/run.sh                        # GPU machine, from the repository root; files to $OUT
#
# build writes the xz-compressed multigpu binary, the two Python scripts and
# this script's run half (run.sh) into $BIN, so that the run needs nothing
# of this branch's checkout (7.5 MB). The launcher is not carried: its
# variables are set by hand (loopback store). run, on ONE GPU (d = 1):
#   1. torch_overlap.py at world size 1 (torchrun)       -> $OUT/torch1.json
#   2. multigpu -compute gemm at d = 1, compared with 1  -> $OUT/d1/ (summary.json, charts)
#   3. multigpu -compute gemm -recipe tile, 2 steps (the 128x128-tile path)
# on TWO or more GPUs instead, d = 2 on GPUs 0 and 1, for NVLink and for
# NCCL_P2P_DISABLE=1 (NCCL over shared memory, about one 200 Gb/s link):
#   torch_overlap.py under torchrun                      -> $OUT/torch2nvlink.json, torch2shm.json
#   multigpu -compute gemm, both ranks started here      -> $OUT/d2nvlink/, $OUT/d2shm/
# and everything printed -> $OUT/overlapcompute.log. TOKENS (default
# 16384) and STEPS (timed iterations per pass, default 10: at d = 1 the
# compute pass varies by +-5% between iterations, more than the
# communication) change the run.
#
# The same with the launcher: see the commands at the end of this file.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-.gpu-overlapcompute}

build() {
	set -e
	mkdir -p "$BIN"
	rm -f "$BIN"/multigpu "$BIN"/multigpu.xz
	export CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations" # go-nvml's header
	go build -ldflags="-s -w" -o "$BIN"/multigpu ./examples/multigpu
	xz -9 "$BIN"/multigpu
	cp scripts/bench/torch_overlap.py scripts/bench/torch_zero1.py "$BIN"/
	sed -n '/^# RUN-HALF$/,$p' scripts/gpu/overlapcompute.sh >"$BIN"/run.sh
	{
		git rev-parse HEAD
		git status --porcelain --untracked-files=no | sed 's/^/modified: /'
		date -u +%Y-%m-%dT%H:%M:%SZ
	} >"$BIN"/commit
	du -sh "$BIN"
}

case "${1:-}" in
build) build; exit $? ;;
run) ;;
*) echo "usage: $0 build (then sh $BIN/run.sh on the GPU machine)" >&2; exit 2 ;;
esac

# RUN-HALF
# The run half (copied to $BIN/run.sh by build): sh .gpu-overlapcompute/run.sh
set -u
bin=${BIN:-.gpu-overlapcompute}
out=${OUT:-/tmp/overlapcompute-out}
mkdir -p "$out"
tmp=$(mktemp -d)
# single: d = 1, no launcher (its variables set by hand, loopback store).
single() {
	st=0
	echo "== 1. PyTorch baseline (torch._scaled_mm, async collectives), world size 1, $tokens tokens"
	bl=""
	if timeout 60 torchrun --standalone --nproc-per-node 1 "$bin/torch_overlap.py" --tokens "$tokens" --steps "$steps" \
		--json "$out/torch1.json"; then
		bl="-baseline $out/torch1.json"
	else
		st=1
	fi
	echo "== 2. distopt -compute gemm, d = 1, $tokens tokens"
	# shellcheck disable=SC2086 # bl holds a flag and its value
	RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 \
		timeout 70 "$tmp/multigpu" -compute gemm -tokens "$tokens" -warmup 2 -steps "$steps" -timeout 65s -out "$out/d1" $bl || st=1
	echo "== 3. distopt -compute gemm -recipe tile (128x128 weights, 1x128 activations), d = 1, 2 iterations per pass"
	RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29534 \
		timeout 40 "$tmp/multigpu" -compute gemm -recipe tile -tokens "$tokens" -warmup 1 -steps 2 -timeout 35s || st=1
	return $st
}

# pair LABEL ENV: d = 2 on GPUs 0 and 1 with the environment ENV (e.g.
# NCCL_P2P_DISABLE=1): the PyTorch baseline under torchrun, then distopt's
# two ranks started by hand with the launcher's variables (rank 1 in the
# background, its last lines printed after).
pair() {
	st=0
	echo "== $1: PyTorch baseline, world size 2, $tokens tokens ${2:-(NVLink)}"
	bl=""
	# shellcheck disable=SC2086 # $2 is an assignment or nothing
	if env $2 timeout 75 torchrun --standalone --nproc-per-node 2 "$bin/torch_overlap.py" --tokens "$tokens" --steps "$steps" \
		--json "$out/torch2$1.json"; then
		bl="-baseline $out/torch2$1.json"
	else
		st=1
	fi
	echo "== $1: distopt -compute gemm, d = 2, $tokens tokens ${2:-(NVLink)}"
	port=$((29540 + ${#1}))
	# shellcheck disable=SC2086
	env $2 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
		timeout 90 "$tmp/multigpu" -compute gemm -tokens "$tokens" -warmup 2 -steps "$steps" -timeout 85s >"$tmp/rank1.log" 2>&1 &
	p1=$!
	# shellcheck disable=SC2086
	env $2 RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
		timeout 90 "$tmp/multigpu" -compute gemm -tokens "$tokens" -warmup 2 -steps "$steps" -timeout 85s -out "$out/d2$1" $bl || st=1
	wait $p1 || st=1
	tail -4 "$tmp/rank1.log" | sed 's/^/[rank 1] /'
	return $st
}

run() {
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
	export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	tnccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
	if [ -n "$tnccl" ] && [ -f "$tnccl" ]; then export NCCL_LIBRARY=$tnccl; fi
	echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "== built from:"; cat "$bin/commit"
	echo "== host: $(uname -r), $(nproc) cpus; NCCL_LIBRARY=${NCCL_LIBRARY:-system}"
	nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv
	xz -dc "$bin/multigpu.xz" >"$tmp/multigpu" && chmod +x "$tmp/multigpu" || return 1
	tokens=${TOKENS:-16384}
	steps=${STEPS:-10}
	gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
	status=0
	if [ "$gpus" -ge 2 ]; then
		pair nvlink "" || status=1
		pair shm "NCCL_P2P_DISABLE=1" || status=1
	else
		single || status=1
	fi
	nvidia-smi --query-gpu=index,memory.used --format=csv
	echo "== overlapcompute: $([ $status -eq 0 ] && echo all ran || echo FAILURES)"
	return $status
}
{ run; echo $? >"$tmp/status"; } 2>&1 | tee "$out/overlapcompute.log"
st=$(cat "$tmp/status")
rm -rf "$tmp"
exit "$st"

# Two GPUs (nvidia-h200-x2), from the repository root, after build (with
# cmd/distopt built too: go build -ldflags="-s -w" -o $BIN/ ./cmd/distopt):
#
#   NVLink:
#   torchrun --standalone --nproc-per-node 2 $BIN/torch_overlap.py --tokens 16384 --steps 10 --json $OUT/torch2.json
#   $BIN/distopt run --nproc-per-node 2 -- $BIN/multigpu -compute gemm -tokens 16384 -steps 10 -out $OUT/d2 -baseline $OUT/torch2.json
#
#   NCCL over shared memory (one 200 Gb/s link per GPU):
#   NCCL_P2P_DISABLE=1 torchrun --standalone --nproc-per-node 2 $BIN/torch_overlap.py --tokens 16384 --steps 10 --json $OUT/torch2shm.json
#   NCCL_P2P_DISABLE=1 $BIN/distopt run --nproc-per-node 2 -- $BIN/multigpu -compute gemm -tokens 16384 -steps 10 -out $OUT/d2shm -baseline $OUT/torch2shm.json
#
# (NCCL_NVLS_ENABLE=0 and NCCL_LIBRARY as in the run half above.)
