#!/bin/sh
# GoMLX on a GPU: build here, run on the GPU machine.
#
#   interop/gomlx/scripts/gomlx_gpu.sh build            # here (Go, cgo): binaries and data into .gpu/gomlx
#   interop/gomlx/scripts/gomlx_gpu.sh tests            # there, from the repository root: the GPU tests
#   interop/gomlx/scripts/gomlx_gpu.sh lm distopt 1000  # there: the byte-level LM with distopt (E4M3, current)
#   interop/gomlx/scripts/gomlx_gpu.sh lm adam 1000     # there: the same with GoMLX's own Adam
#   interop/gomlx/scripts/gomlx_gpu.sh compare 1000 540 # there: both lm runs at once (loss only), each stopped after 540 s
#   interop/gomlx/scripts/gomlx_gpu.sh issue36 580      # there: issue 36's runs in one call (below)
#   interop/gomlx/scripts/gomlx_gpu.sh d2 1000          # there, on two GPUs: distopt run --nproc-per-node 2
#
# d2 is the d > 1 path (NCCL, one process, GPU and XLA client per rank); it
# has not run yet (no two-GPU machine so far). Each rank trains its own
# batch of LM_ARGS, rank 0 writes the curve (d2.csv), every rank's log goes
# to d2.log with the launcher's [rank N] prefixes.
#
# xlamem prints what XLA's buffer assignment gives each step graph of three
# runs, lm adam, lm distopt -moments fp8,bf16 and the same with
# -copy-grads (30 steps each, about 95 s each with compilation), and
# their NVML peaks and speed, for issue 36's memory criterion.
#
# issue36 LIMIT runs, within LIMIT seconds: lm adam 100, lm distopt 100
# and lm distopt 100 with -moments fp8,bf16 (files tagged distopt8), each
# alone (tokens/s, the hand-over, NVML peaks), then compare 1000 in the
# time left (the loss comparison); ALONE sets the alone runs' steps.
#
# Results go to $OUT (or .gpu/gomlx/out): logs, loss curves (CSV), NVML
# memory samples. Each lm run is one process, alone on the GPU; TAG names
# its files (default: the optimizer). Binaries
# and data travel compressed (xz) to stay under the device's 64 MiB limit.
# Environment there: DISTOPT_XLA_PLUGIN (default: JAX's plugin in
# /opt/torch/.venv), XLA_FLAGS (default --xla_gpu_autotune_level=0: XLA's
# autotuning made the 12-layer model compile for over a minute), LM_ARGS
# (default: 12 layers, width 768, 12 heads, 256 bytes, batch 16, lr 6e-4),
# TOKENS (build: training tokens kept, default 16M).
set -eu
dir=.gpu/gomlx
cmd=${1:-}

unxz_to() { # file.xz -> file, with xz or Python's lzma
	xz -dkc "$1" >"$2" 2>/dev/null || python3 -c "import lzma,shutil,sys;shutil.copyfileobj(lzma.open(sys.argv[1]),open(sys.argv[2],'wb'))" "$1" "$2"
}

# cmp_start LIMIT: compare's two lm runs in the background, each stopped
# after LIMIT seconds; their pids in $pids.
cmp_start() {
	pids=""
	for opt in distopt adam; do
		# shellcheck disable=SC2086
		(timeout "$1" $dir/example -backend gpu -model lm -data $dir/data ${LM_ARGS:--layers 12 -dim 768 -heads 12 -seq 256 -batch 16 -lr 6e-4} \
			-steps "$steps" -optimizer $opt -out "$out/cmp_$opt.csv" >"$out/cmp_$opt.log" 2>&1
		echo "exit $?" >>"$out/cmp_$opt.log") &
		pids="$pids $!"
	done
}

there() {
	export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
	export GOMLX_NO_AUTO_INSTALL=1 GOPJRT_CUDA_CHECKS=0
	export XLA_FLAGS=${XLA_FLAGS:---xla_gpu_autotune_level=0}
	out=${OUT:-$dir/out}
	mkdir -p "$out"
}

case $cmd in
build)
	root=$(git rev-parse --show-toplevel)
	mkdir -p "$root/$dir/data"
	(cd "$root/interop/gomlx" && go test -c -ldflags='-s -w' -o "$root/$dir/gomlx.test" . &&
		go build -ldflags='-s -w' -o "$root/$dir/example" ./example)
	(cd "$root" && go build -ldflags='-s -w' -o "$root/$dir/distopt" ./cmd/distopt)
	(cd "$root" && go run ./examples/gpt/prepare -out "$root/$dir/full")
	python3 - "$root/$dir" "${TOKENS:-16777216}" <<'EOF'
import struct, sys
d, keep = sys.argv[1], int(sys.argv[2])
for name, n in (("train.tok", keep), ("valid.tok", 1 << 20)):
    raw = open(f"{d}/full/{name}", "rb").read()
    vocab, res, count = struct.unpack("<IIQ", raw[8:24])
    n = min(n, count)
    open(f"{d}/data/{name}", "wb").write(raw[:8] + struct.pack("<IIQ", vocab, res, n) + raw[24:24 + 2 * n])
EOF
	rm -rf "$root/$dir/full"
	xz -f -T0 -6 "$root/$dir/gomlx.test" "$root/$dir/example" "$root/$dir/distopt" "$root/$dir/data/train.tok" "$root/$dir/data/valid.tok"
	ls -l "$root/$dir" "$root/$dir/data"
	echo "carry [\"$dir\"]; there: sh interop/gomlx/scripts/gomlx_gpu.sh tests | lm distopt N | lm adam N | d2 N"
	;;
tests)
	there
	unxz_to $dir/gomlx.test.xz $dir/gomlx.test && chmod +x $dir/gomlx.test
	$dir/gomlx.test -test.v -test.run 'TestGPU|TestDecode|TestWeightGrad' -test.timeout 500s 2>&1 | tee "$out/tests.log"
	;;
lm)
	there
	opt=${2:?distopt or adam}
	steps=${3:-1000}
	tag=${TAG:-$opt}
	unxz_to $dir/example.xz $dir/example && chmod +x $dir/example
	for f in train valid; do [ -f $dir/data/$f.tok ] || unxz_to $dir/data/$f.tok.xz $dir/data/$f.tok; done
	nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$out/nvml_$tag.txt" &
	smi=$!
	# shellcheck disable=SC2086
	$dir/example -backend gpu -model lm -data $dir/data ${LM_ARGS:--layers 12 -dim 768 -heads 12 -seq 256 -batch 16 -lr 6e-4} \
		-steps "$steps" -optimizer "$opt" -out "$out/$tag.csv" 2>&1 | tee "$out/$tag.log" || true
	kill $smi
	echo "NVML peak (MiB, all processes): $(sort -n "$out/nvml_$tag.txt" | tail -1)" | tee -a "$out/$tag.log"
	;;
issue36)
	limit=${2:-580}
	t0=$(date +%s)
	left() { echo $((limit - ($(date +%s) - t0))); }
	lm="${LM_ARGS:--layers 12 -dim 768 -heads 12 -seq 256 -batch 16 -lr 6e-4}"
	for run in "adam" "distopt" "distopt -moments fp8,bf16"; do
		opt=${run%% *} tag=$opt extra=""
		[ "$run" = "$opt" ] || { tag=distopt8 extra=${run#* }; }
		[ "$(left)" -gt 120 ] || { echo "== $tag skipped: $(left) s left"; continue; }
		# XLA's flags as compare's (accepted by jax-cuda13-pjrt 0.11.2)
		XLA_FLAGS="${XLA_FLAGS:---xla_gpu_autotune_level=0} --xla_gpu_enable_triton_gemm=false" TAG=$tag LM_ARGS="$lm $extra" \
			timeout 150 sh "$0" lm "$opt" "${ALONE:-100}" >/dev/null 2>&1 || true
		echo "== $tag alone ($(left) s left)"
		grep -E '^(summary|hand-over|NVML|first step|distopt)' "${OUT:-$dir/out}/$tag.log" || tail -n 5 "${OUT:-$dir/out}/$tag.log"
	done
	if [ "$(left)" -gt 150 ]; then
		LM_ARGS="$lm" sh "$0" compare 1000 $(($(left) - 10))
	else
		echo "== compare skipped: $(left) s left"
	fi
	;;
compare)
	# Both lm runs side by side on the one GPU, for the loss comparison only
	# (their speed is measured by lm, alone). XLA_FLAGS adds
	# --xla_gpu_enable_triton_gemm=false (cuBLAS's products need no
	# autotuning); a plugin that does not know the flag is run again without.
	there
	steps=${2:-1000}
	limit=${3:-540}
	unxz_to $dir/example.xz $dir/example && chmod +x $dir/example
	for f in train valid; do [ -f $dir/data/$f.tok ] || unxz_to $dir/data/$f.tok.xz $dir/data/$f.tok; done
	base=$XLA_FLAGS
	export XLA_FLAGS="$base --xla_gpu_enable_triton_gemm=false"
	nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$out/nvml_compare.txt" &
	smi=$!
	cmp_start "$limit"
	sleep 45
	if grep -qi 'unknown flag' "$out/cmp_distopt.log" "$out/cmp_adam.log"; then
		echo "XLA rejected --xla_gpu_enable_triton_gemm=false; again with $base"
		wait $pids || true # the runs end early on a rejected flag; their status is in the logs
		export XLA_FLAGS=$base
		cmp_start $((limit - 40))
	fi
	wait $pids || true # each run writes its exit status to its log
	kill $smi
	echo "XLA_FLAGS=$XLA_FLAGS"
	echo "$XLA_FLAGS" >"$out/xla_flags.txt"
	for opt in distopt adam; do
		echo "== $opt"
		grep -v '^step ' "$out/cmp_$opt.log" | tail -n 8
		grep '^step ' "$out/cmp_$opt.log" | tail -n 3
		tail -n 1 "$out/cmp_$opt.csv"
	done
	;;
xlamem)
	# What XLA itself holds (issue 36's memory criterion): each run of
	# XLAMEM_RUNS ('|' between runs; default three runs: lm adam, lm distopt
	# -moments fp8,bf16, and the same with -copy-grads: the gradients
	# copied into distopt's own buffers instead of lent), XLAMEM_STEPS
	# steps (30: the last 20 timed) with XLA's dumps on; each step graph's
	# buffer assignment says its temporary and output bytes (a decoded
	# float32 model kept from forward to backward shows there, with
	# -keep-decoded). Prints
	# each module's totals; the assignments go to $out/xla_dumps.tar.xz.
	there
	lm="${LM_ARGS:--layers 12 -dim 768 -heads 12 -seq 256 -batch 16 -lr 6e-4}"
	dumps=$(mktemp -d)
	old_ifs=$IFS
	IFS='|'
	set -- ${XLAMEM_RUNS:-adam|distopt -moments fp8,bf16|distopt -moments fp8,bf16 -copy-grads}
	IFS=$old_ifs
	for run in "$@"; do
		opt=${run%% *} extra=""
		[ "$run" = "$opt" ] || extra=${run#* }
		tag=xla_$(echo "$run" | tr -cs 'a-z0-9\n' '_' | sed 's/^_//; s/_$//')
		XLA_FLAGS="${XLA_FLAGS} --xla_gpu_enable_triton_gemm=false --xla_dump_to=$dumps/$tag --xla_dump_hlo_as_text" \
			TAG=$tag LM_ARGS="$lm $extra" timeout 200 sh "$0" lm "$opt" "${XLAMEM_STEPS:-30}" >/dev/null 2>&1 || true
		echo "== $tag: $(grep -E '^(summary|hand-over|NVML)' "$out/$tag.log" | tr '\n' ' ')"
		for f in "$dumps/$tag"/*buffer-assignment.txt; do
			[ -f "$f" ] || { echo "no buffer assignment dumped in $dumps/$tag"; break; }
			echo "$(basename "$f"): temp $(grep -m1 'preallocated-temp' "$f" | cut -d, -f1)"
			awk '/^allocation [0-9]+: size [0-9]+/ {s = $4; sub(",", "", s); print s " " $0}' "$f" | sort -n | tail -n 3 | cut -d' ' -f2- | cut -c1-160
		done
		rm -f "$out/nvml_$tag.txt" "$out/$tag.csv"
	done
	(cd "$dumps" && find . -name '*buffer-assignment.txt' -o -name '*memory-usage-report.txt' | tar cf - -T - | xz -6 >"$out/xla_dumps.tar.xz")
	rm -rf "$dumps"
	;;
d2)
	there
	steps=${2:-1000}
	for f in example distopt; do unxz_to $dir/$f.xz $dir/$f && chmod +x $dir/$f; done
	for f in train valid; do [ -f $dir/data/$f.tok ] || unxz_to $dir/data/$f.tok.xz $dir/data/$f.tok; done
	nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 200 >"$out/nvml_d2.txt" &
	smi=$!
	# shellcheck disable=SC2086
	$dir/distopt run --nproc-per-node 2 -- $dir/example -backend gpu -model lm -data $dir/data \
		${LM_ARGS:--layers 12 -dim 768 -heads 12 -seq 256 -batch 16 -lr 6e-4} \
		-steps "$steps" -out "$out/d2.csv" 2>&1 | tee "$out/d2.log" || true
	kill $smi
	echo "NVML peak per GPU (index, MiB): $(sort -t, -k2 -n "$out/nvml_d2.txt" | awk -F, '{m[$1]=$2} END {for (i in m) printf "%s:%s ", i, m[i]}')" | tee -a "$out/d2.log"
	;;
*)
	sed -n '2,30p' "$0"
	exit 2
	;;
esac
