#!/bin/sh
# coldstart.sh measures issue 37's cold start on one GPU machine, in one
# call: the old binaries (commit $OLD, PTX only) against the new ones
# (cubins from ptxas, PTX for other GPUs).
#
#   scripts/gpu/coldstart.sh build   # build machine: binaries, sizes, data into $BIN
#   sh $BIN/coldstart.sh run         # GPU machine (carry $BIN); results in $OUT
#
# BIN is .gpu/coldstart (relative to the repository root) unless set; build
# copies this script there, so that a checkout without it can run it.
# run, in the order of what matters most, each part within what is left of
# BUDGET seconds (280):
#   1. examples/gpt -backend gpu -preset small -batch 4 -steps 2, new then
#      old: seconds from the process's start to its first step's line, with
#      an empty CUDA cache (CUDA_CACHE_PATH a fresh directory), the same
#      cache warm, and (new only) CUDA_CACHE_DISABLE=1 ($OUT/startup.txt,
#      their output with times in ms in $OUT/startup_logs.txt);
#   2. the GPU tests of internal/kernels and examples/gpt/kernels on the
#      sm90 cubins (exact comparisons
#      with the CPU reference; DISTOPT_TEST_VARIANTS=sm90 leaves out the
#      sm80 PTX, whose JIT takes minutes; TestImages checks what loaded);
#   3. kernel speed, ptxas's code against the driver JIT's
#      (DISTOPT_CUDA_PTX=1): distopt-bench-update and the benchmarks of
#      both kernel packages, each way ($OUT/bench_{cubin,ptx}.log);
#   4. the old binary with CUDA_CACHE_DISABLE=1 in the time left (it JITs
#      the PTX of every module on every load: minutes).
# $OUT also gets sizes.txt (build's sizes) and kernels_tests.log. Options:
# OLD_BINS=0 (build) builds no old binaries, and run then times the new
# ones alone; TESTS (run) is the tests' -test.run pattern (all); BENCHTIME
# the benchmarks' -test.benchtime (10x); AGAIN=1 runs the cubin benchmarks
# a second time after the PTX ones (bench_cubin2.log), to see the drift.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=${BIN:-.gpu/coldstart}
OLD=${OLD:-73dfcd8}
gptflags="-backend gpu -preset small -batch 4 -steps 2 -sample 0 -eval-every 0 -eval-windows 4"

# sizes TREE LABEL: the generated code's bytes and lines in TREE
# (internal/kernels, and examples/gpt/kernels where it exists).
sizes() {
	d=$1/internal/kernels
	# ls fails on the folders an older tree lacks: under set -e that
	# would end build's size report, and with it the binaries' build
	ptx=$(ls "$d"/ptx/*.ptx "$1"/examples/gpt/kernels/ptx/*.ptx 2>/dev/null || true)
	cubin=$(ls "$d"/cubin/*.cubin "$1"/examples/gpt/kernels/cubin/*.cubin 2>/dev/null || true)
	printf '%s: ptx/ %s bytes, %s lines' "$2" "$(cat $ptx | wc -c)" "$(cat $ptx | wc -l)"
	if [ -n "$cubin" ]; then
		printf ', cubin/ %s bytes' "$(cat $cubin | wc -c)"
	fi
	printf ', update_sm80.ptx %s lines, update_sm90.ptx %s lines\n' "$(wc -l <"$d/ptx/update_sm80.ptx")" "$(wc -l <"$d/ptx/update_sm90.ptx")"
}

# binsizes TREE LABEL: examples/gpt and distopt-bench-update built in TREE,
# their sizes as built by default and stripped (-s -w); the stripped ones
# stay in $bin/LABEL/.
binsizes() {
	mkdir -p "$abs/$2"
	for p in examples/gpt cmd/distopt-bench-update; do
		n=$(basename $p)
		(cd "$1" && go build -o "$abs/$2/$n.full" ./$p && go build -ldflags="-s -w" -o "$abs/$2/$n" ./$p) || return
		echo "$2: $n $(wc -c <"$abs/$2/$n.full") bytes, stripped $(wc -c <"$abs/$2/$n")"
		rm -f "$abs/$2/$n.full"
	done
}

build() {
	set -e
	rm -rf "$bin"
	mkdir -p "$bin"
	abs=$(cd "$bin" && pwd)
	old=$(mktemp -d)
	git archive "$OLD" | tar -x -C "$old"
	{
		echo "old: $OLD ($(git log -1 --format=%cd --date=iso "$OLD")); new: $(git rev-parse --short HEAD)"
		sizes "$old" old
		sizes . new
		[ "${OLD_BINS:-1}" = 0 ] || binsizes "$old" old
		binsizes . new
	} | tee "$abs/sizes.txt"
	rm -rf "$old"
	[ -x "$abs/new/gpt" ] || { echo "coldstart.sh: $abs/new/gpt was not built (see above)" >&2; exit 1; }
	rm -f "$abs/old/distopt-bench-update"
	go test -c -ldflags="-s -w" -o "$abs/new/internal_kernels.test" ./internal/kernels
	go test -c -ldflags="-s -w" -o "$abs/new/gpt_kernels.test" ./examples/gpt/kernels
	go run ./examples/gpt/prepare -root "$(go env GOROOT)/src/go" -out "$abs/data"
	cp scripts/gpu/coldstart.sh "$abs/coldstart.sh"
	cp "$abs/sizes.txt" "$abs/commit"
	(cd "$abs" && tar cf - $(ls -d old new 2>/dev/null) | xz -T1 --lzma2=preset=6,dict=192MiB >bins.tar.xz && rm -rf old new)
	xz -T1 -6 "$abs"/data/*.tok
	du -sh "$abs"
}

# left: seconds left of the budget.
left() { echo $((deadline - $(date +%s))); }

# startup NAME BINARY MODE: one timed start of examples/gpt (MODE empty,
# warm or off), each line of its output stamped with the seconds since
# the start; appends "NAME MODE first-step total" to $OUT/startup.txt.
startup() {
	name=$1 exe=$2 mode=$3
	lim=$(($(left) - 5))
	[ "$lim" -gt 10 ] || { echo "$name $mode: no time left" | tee -a "$OUT/startup.txt"; return; }
	case $mode in
	empty) rm -rf "$tmp/cache_$name" && mkdir -p "$tmp/cache_$name" ;;
	esac
	log=$tmp/startup_${name}_$mode.log
	t0=$(date +%s%N)
	(
		if [ "$mode" = off ]; then export CUDA_CACHE_DISABLE=1; else export CUDA_CACHE_PATH=$tmp/cache_$name; fi
		timeout "$lim" "$exe" $gptflags -data "$bin/data" 2>&1
		echo "exit $?"
	) | while IFS= read -r line; do
		echo "$((($(date +%s%N) - t0) / 1000000)) $line"
	done >"$log"
	awk -v n="$name" -v m="$mode" '/ step +1\// && !f { f = $1 } / attention: / && !a { a = $0; sub(/^[0-9]+ /, "", a) } { last = $1 }
		END { printf "%s %s first-step %s s, total %.2f s, %s; %s\n", n, m, f ? sprintf("%.2f", f / 1000) : "none", last / 1000, $2 " " $3, a }' "$log" |
		tee -a "$OUT/startup.txt"
	{
		echo "== $name $mode"
		cat "$log"
	} >>"$OUT/startup_logs.txt"
}

# bench MODE [LOG]: the kernel benchmarks with the cubins (MODE cubin) or
# the PTX through the driver's JIT (ptx), into $OUT/bench_LOG.log (LOG is
# MODE unless given).
bench() {
	(
		export CUDA_CACHE_PATH=$tmp/cache_bench DISTOPT_TEST_VARIANTS=sm90
		[ "$1" = ptx ] && export DISTOPT_CUDA_PTX=1
		echo "== $1: distopt-bench-update -n 67108864 -iters 20 ($(left) s left)"
		timeout $(($(left) - 10)) "$bin/new/distopt-bench-update" -n 67108864 -iters 20
		echo "== $1: internal/kernels benchmarks ($(left) s left)"
		(cd internal/kernels && timeout $(($(left) - 10)) "$root/$bin/new/internal_kernels.test" -test.run '^$' \
			-test.bench 'CastScaled|EncodeFP8|GradStats$' -test.benchtime "${BENCHTIME:-10x}")
		echo "== $1: examples/gpt/kernels benchmarks ($(left) s left)"
		cd examples/gpt/kernels && timeout $(($(left) - 10)) "$root/$bin/new/gpt_kernels.test" -test.run '^$' \
			-test.bench 'FlashKernels|GPT' -test.benchtime "${BENCHTIME:-10x}"
	) >"$OUT/bench_${2:-$1}.log" 2>&1
}

run() {
	deadline=$(($(date +%s) + ${BUDGET:-280}))
	. scripts/gpu/lib.sh
	unpack
	# cuDNN on the loader's path, as in the bench: -attention auto (the
	# default) opens its attention, whose plans are built at the first step
	LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
	cudnn_env >"$OUT/cudnn_env.txt"
	tmp=$(mktemp -d)
	cp "$bin/sizes.txt" "$OUT/"
	xz -d -f -T0 "$bin"/data/*.xz
	for m in empty warm off; do startup new "$bin/new/gpt" $m; done
	if [ -e "$bin/old/gpt" ]; then
		for m in empty warm; do startup old "$bin/old/gpt" $m; done
	fi
	echo "== internal/kernels and examples/gpt/kernels GPU tests on the cubins ($(left) s left)"
	lim=$(($(left) - 100))
	[ "$lim" -ge 30 ] || lim=30
	for k in internal/kernels:internal_kernels examples/gpt/kernels:gpt_kernels; do
		(cd "${k%%:*}" && CUDA_CACHE_PATH=$tmp/cache_bench DISTOPT_TEST_VARIANTS=sm90 \
			timeout $lim "$root/$bin/new/${k##*:}.test" -test.v -test.run "${TESTS:-.}")
	done >"$OUT/kernels_tests.log" 2>&1
	echo "exit $?: $(grep -c -- '--- PASS' "$OUT/kernels_tests.log") passed, $(grep -c -- '--- FAIL' "$OUT/kernels_tests.log") failed"
	grep -E -- '--- FAIL|^FAIL|panic' "$OUT/kernels_tests.log" | head -20
	bench cubin
	bench ptx
	[ "${AGAIN:-0}" = 0 ] || bench cubin cubin2
	grep -E '^(==|Benchmark)|GB/s' "$OUT"/bench_*.log | cut -c1-200 | head -120
	[ ! -e "$bin/old/gpt" ] || startup old "$bin/old/gpt" off
	rm -rf "$tmp"
	cat "$OUT/startup.txt"
}

case ${1:-} in
build) build ;;
run) run ;;
*)
	echo "usage: coldstart.sh build|run" >&2
	exit 2
	;;
esac
