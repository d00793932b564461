#!/bin/sh
# two.sh gathers the runs that need two GPUs (nvidia-h200-x2) into two
# device calls of at most 10 minutes each, from binaries built here:
#
#   sh scripts/gpu/two.sh build        # here: .gpu-two/a and .gpu-two/b (solid xz)
#   sh scripts/gpu/two.sh a            # there, carry .gpu-two/a (about 7 min)
#   sh scripts/gpu/two.sh b            # there, carry .gpu-two/b (about 5 min)
#
# a (the optimizer, issues 17, 15, 18 and 20; the most wanted first):
#   0. the 1.42B step at d = 2 (examples/multigpu, synthetic gradients,
#      current and delayed scaling) against scripts/bench/torch_zero1.py;
#   1. overlapcompute.sh's two-GPU half: examples/multigpu -compute gemm at
#      d = 2 against scripts/bench/torch_overlap.py, NVLink and
#      NCCL_P2P_DISABLE=1 (exposed communication, issue 15);
#   2. optimizer/gpu TestNCCLOverlap and TestNCCLStep (overlapped and
#      synchronous steps on two GPUs against the CPU, every recipe);
#   3. examples/multigpu at d = 2 with -sharded-grads and 8-bit moments:
#      NVML per rank against the planner (issue 18);
#   4. twonode.sh with RECIPES=current REGIMES=0: digests of CPU, one
#      launcher and two nodes, and node 1 killed (the error names it).
# b (the GPT example on two GPUs, issue 16):
#   1. speed and memory, each run alone: examples/gpt under `distopt run
#      --nproc-per-node 2` and scripts/gpt/torch_gpt.py under torchrun (DDP),
#      124M (16 x 1024 per rank) and 1.3B (4 x 2048 per rank);
#   2. resume on another GPU count: 2 GPUs stopped at step 20 and resumed on
#      one GPU with two micro-batches (the same sequences per step), against
#      the uninterrupted 2-GPU run: the first resumed step's loss equal,
#      the rest close (curves -resume prints the first difference).
# Logs and JSON into $OUT (at most 8 files come back: packed).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
top=.gpu-two

build() {
	set -e
	rm -rf $top
	mkdir -p $top/a $top/b
	export CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations" # go-nvml's header
	go build -ldflags="-s -w" -o $top/a/multigpu ./examples/multigpu
	go build -ldflags="-s -w" -o $top/a/distopt ./cmd/distopt
	go build -ldflags="-s -w" -o $top/a/train ./examples/train
	go test -c -ldflags="-s -w" -o $top/a/optimizer_gpu.test ./optimizer/gpu
	cp scripts/bench/torch_overlap.py scripts/bench/torch_zero1.py $top/a/
	sed -n '/^# RUN-HALF$/,$p' scripts/gpu/overlapcompute.sh >$top/a/overlap_run.sh
	cp $top/a/distopt $top/b/
	go build -ldflags="-s -w" -o $top/b/gpt ./examples/gpt
	go build -ldflags="-s -w" -o $top/b/curves ./examples/gpt/curves
	if [ -d .gpu-gptlong/data ]; then
		mkdir -p $top/b/data
		cp .gpu-gptlong/data/* $top/b/data/
	else
		go run ./examples/gpt/prepare -root "$(go env GOROOT)/src" -out $top/b/data
		xz -T2 -6 $top/b/data/*.tok
	fi
	for d in a b; do
		# the binaries of a folder in one solid archive (they share most of
		# their bytes; the working tree and the carry must stay under 64 MiB)
		(cd $top/$d && bins=$(ls | grep -v -e '\.py$' -e '\.sh$' -e '^data$') &&
			tar cf - $bins | xz -T1 --lzma2=preset=9,dict=192MiB >bins.tar.xz && rm -f $bins)
		{
			git rev-parse HEAD
			git status --porcelain --untracked-files=no | sed 's/^/modified: /'
		} >$top/$d/commit
	done
	du -sh $top/a $top/b
}

unpack() { # dir
	if [ -e "$1/bins.tar.xz" ]; then
		xz -dc -T0 "$1/bins.tar.xz" | tar x -C "$1" && rm -f "$1/bins.tar.xz"
	fi
	for f in "$1"/data/*.xz; do [ -e "$f" ] && xz -d -f -T0 "$f"; done
	for f in "$1"/*; do case $f in *.py | *.sh | */commit | */data) ;; *) chmod +x "$f" ;; esac; done
}

env_setup() {
	OUT=${OUT:-$root/$top/out}
	mkdir -p "$OUT"
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export PATH="/opt/torch/.venv/bin:$PATH"
	nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv
}

part_a() {
	bin=$top/a
	unpack $bin
	# overlap_run.sh unpacks multigpu.xz itself: give it one again.
	xz -k -T0 -6 $bin/multigpu
	status=0
	echo "== a0. the 1.42B step at d = 2 (synthetic gradients) against PyTorch ZeRO-1 ($(date +%T))"
	timeout 120 torchrun --standalone --nproc-per-node 2 $bin/torch_zero1.py --steps ${A0_STEPS:-5} --plain-steps ${A0_STEPS:-5} \
		--json "$OUT/torch_zero1.json" >"$OUT/torch_zero1.log" 2>&1 || status=1
	tail -3 "$OUT/torch_zero1.log"
	bl=""
	[ -s "$OUT/torch_zero1.json" ] && bl="-baseline $OUT/torch_zero1.json"
	for r in ${A0_RECIPES:-current delayed}; do
		# shellcheck disable=SC2086 # $bl holds a flag and its value
		timeout 100 $bin/distopt run --nproc-per-node 2 -- $bin/multigpu -recipe $r -steps ${A0_STEPS:-5} -plain-steps ${A0_STEPS:-5} \
			-timeout 95s -out "$OUT/step_$r" $bl >"$OUT/step_$r.log" 2>&1 || status=1
		grep -E 'distopt \(|PyTorch|ratio|reduce_scatter' "$OUT/step_$r.log" | head -5
	done
	echo "== a1. exposed communication, d = 2 ($(date +%T))"
	BIN=$bin OUT="$OUT/overlap" sh $bin/overlap_run.sh >/dev/null 2>&1 || status=1
	grep -E '^==|exposed|hidden|iteration|compute|baseline|FAIL|rror' "$OUT/overlap/overlapcompute.log" | head -60
	echo "== a2. TestNCCLOverlap, TestNCCLStep ($(date +%T))"
	(cd optimizer/gpu && DISTOPT_REQUIRE_GPU=1 timeout ${A2_TIMEOUT:-200} "$root/$bin/optimizer_gpu.test" -test.v -test.run 'TestNCCLStep|TestNCCLOverlap') \
		>"$OUT/nccl_tests.log" 2>&1 || status=1
	grep -E '^(--- |ok|PASS|FAIL|panic)' "$OUT/nccl_tests.log" | head -20
	echo "   $(grep -c -- '--- PASS' "$OUT/nccl_tests.log") passed, $(grep -c -- '--- FAIL' "$OUT/nccl_tests.log") failed"
	echo "== a3. multigpu d = 2, sharded gradients, 8-bit moments: NVML against the planner ($(date +%T))"
	for m in fp8,bf16 fp8; do
		timeout 90 $bin/distopt run --nproc-per-node 2 -- $bin/multigpu -sharded-grads -moments "$m" -steps 3 -plain-steps 3 \
			>"$OUT/sharded_$m.log" 2>&1 || status=1
		grep -E 'plain|rror|panic' "$OUT/sharded_$m.log" | tail -2
	done
	echo "== a4. twonode.sh (current; no regimes) ($(date +%T))"
	BIN=$bin RECIPES=current REGIMES=0 OUT="$OUT" timeout 200 sh scripts/gpu/twonode.sh run >"$OUT/twonode.log" 2>&1 || status=1
	grep -E '^\[|^==|failed|names' "$OUT/twonode.log" | head -40
	echo "== two.sh a: $([ $status -eq 0 ] && echo all passed || echo FAILURES) ($(date +%T))"
	return $status
}

# gpt2 NAME ARGS...: examples/gpt on both GPUs, its log in $OUT/NAME.log.
gpt2() {
	name=$1
	shift
	timeout 150 $bin/distopt run --nproc-per-node 2 -- $bin/gpt -backend gpu -data $bin/data "$@" >"$OUT/$name.log" 2>&1 || status=1
	grep -E '^(\[rank 0\] )?(step +[0-9]+/|gpt on|speed|resumed)|rror|panic' "$OUT/$name.log" | tail -3 | cut -c1-260
}

part_b() {
	bin=$top/b
	unpack $bin
	status=0
	for shape in small:16 1.3b:4; do
		p=${shape%%:*} b=${shape#*:}
		echo "== b1. $p, $b sequences per rank, 2 GPUs ($(date +%T))"
		gpt2 "bench2_distopt_$p" -preset $p -batch $b -steps 10 -eval-every 0 -eval-windows $b -sample 0 -curve "$OUT/bench2_distopt_$p.json"
		timeout 150 torchrun --standalone --nproc-per-node 2 scripts/gpt/torch_gpt.py --data $bin/data --shape $p --batch $b --steps 10 \
			--eval-every 0 --eval-windows $b --sdpa flash --name "torch DDP $p" --out "$OUT/bench2_torch_$p.json" >"$OUT/bench2_torch_$p.log" 2>&1 || status=1
		grep -E '^speed|rror' "$OUT/bench2_torch_$p.log" | tail -2
	done
	$bin/curves -speed "$OUT/bench2_distopt_small.json" "$OUT/bench2_torch_small.json" "$OUT/bench2_distopt_1.3b.json" "$OUT/bench2_torch_1.3b.json" || status=1
	echo "== b2. resume on another GPU count: 2 GPUs to step 20, then 1 GPU x 2 micro-batches ($(date +%T))"
	# -act-history 0: the default's activation histories are each rank's own,
	# so a checkpoint with them resumes only on the same number of GPUs.
	common="-preset small -seq 256 -batch 8 -lr 1e-3 -steps 40 -eval-every 10 -eval-windows 64 -sample 0 -act-history 0"
	rm -rf $bin/ck
	# shellcheck disable=SC2086
	gpt2 resume2_full $common -curve "$OUT/resume2_full.json"
	# shellcheck disable=SC2086
	gpt2 resume2_first $common -ckpt $bin/ck -stop-after 20 -curve "$OUT/resume2_first.json"
	# shellcheck disable=SC2086
	timeout 120 $bin/gpt -backend gpu -data $bin/data $common -micro 2 -ckpt $bin/ck -resume -curve "$OUT/resume2_rest.json" \
		>"$OUT/resume2_rest.log" 2>&1 || status=1
	grep -E 'resumed|validation|rror' "$OUT/resume2_rest.log" | tail -4
	$bin/curves -resume "$OUT/resume2_full.json" "$OUT/resume2_first.json" "$OUT/resume2_rest.json"
	$bin/curves -ref "$OUT/resume2_full.json" -warmup 20 -final 0.01 -every 0.01 "$OUT/resume2_rest.json" || status=1
	echo "== two.sh b: $([ $status -eq 0 ] && echo all passed || echo FAILURES) ($(date +%T))"
	return $status
}

case "${1:-}" in
build) build ;;
a | b)
	env_setup
	{ "part_$1"; echo $? >"$OUT/status"; } 2>&1 | tee "$OUT/two_$1.log"
	st=$(cat "$OUT/status")
	(cd "$OUT" && tar czf "two_$1_files.tgz" --exclude "two_$1.log" --exclude '*.tgz' . 2>/dev/null)
	find "$OUT" -mindepth 1 -not -name "two_$1.log" -not -name "two_$1_files.tgz" -delete 2>/dev/null
	exit "$st"
	;;
*) echo "usage: $0 build|a|b" >&2; exit 2 ;;
esac
