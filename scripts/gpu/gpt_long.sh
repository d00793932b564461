#!/bin/sh
# gpt_long.sh builds (here) and runs (on a one-GPU machine, in one call of
# at most 10 minutes) the loss, resume, speed and memory runs of issue 16
# (examples/gpt against the PyTorch reference scripts/gpt/torch_gpt.py).
#
#   scripts/gpu/gpt_long.sh build   # build machine: binaries and the token files (xz) into .gpu-gptlong/
#   scripts/gpu/gpt_long.sh run     # GPU machine (carry .gpu-gptlong): logs, JSON curves, PNG into $OUT
#
# build: gpt and curves (stripped; with GPUMODEL=1, the default, also the
# gpumodel tests; with BENCH_UPDATE=1 distopt-bench-update), in one solid
# xz archive, and the token files of the whole GOROOT/src
# prepared here (about 82M training and 3.2M validation tokens; xz keeps
# them near 12 MB).
#
# run, in this order, each part writing into $OUT as it goes (at the end
# everything but gpt_long.log and the PNG is packed into
# $OUT/gpt_long_files.tgz: the device tool brings back at most 8 files):
#  1. the initial weights of the 124M "small" shape, exported there (344 MB:
#     too large to carry; no reference loss: -export-check=false).
#  2. the loss runs, concurrently on the one GPU (four processes): distopt
#     with -recipe current, delayed and tile (128x128 blocks), and PyTorch,
#     from the same initial weights and batches, $STEPS steps of $BATCH
#     sequences of $SEQ, validation every $EVAL_EVERY steps on $EVAL_WINDOWS
#     sequences (rounded down to a multiple of $BATCH) evenly strided over
#     the whole validation split, the same windows in both programs
#     (data.EvalWindows); distopt's tied output head in $HEAD_PRECISION
#     (default bf16, the example's default since 2026-12-06: rounded where
#     PyTorch's autocast rounds it, so that only the linear layers' FP8
#     differs from the BF16 reference; fp32: a float32 head); the batch
#     order of seed $SEED (default 1; the exported initial weights carry it
#     to PyTorch, so both programs read the same batches; the gate over
#     several seeds, scripts/gpu/loss_seeds.sh, runs this part once per
#     seed and compares the recipes' mean differences); then `curves` checks issue
#     16's criteria (final validation loss within 1% of PyTorch's, every
#     evaluation after warm-up within 2%) and draws $OUT/gpt_curves.png and $OUT/gpt_curves_diff.png (each run
#     relative to PyTorch's, with the criteria's bands). With
#     TORCH_OTHER=bf16 (the default) a fifth process trains the PyTorch
#     reference again, whose difference from the first is PyTorch's own
#     run-to-run spread (its nondeterministic kernels): the noise yardstick
#     for reading the FP8 runs' gaps; with tf32 it trains PyTorch without
#     autocast (float32 with TF32 matrix products; fp32: no TF32, several
#     times slower at this batch), how far a change of precision alone
#     moves the reference; empty: no fifth run. The fifth run is compared
#     with the BF16 reference by the same checker. The runs are stopped
#     $LOSS_RESERVE seconds before the call's deadline ($TOTAL seconds after the start) to
#     leave time for the rest; their curves, written after every evaluation,
#     then show how far they came. LOSS_EXTRA adds flags to the distopt
#     runs (e.g. "-act-history 1024": a candidate default against PyTorch).
#  3. resume check on the GPU: $RESUME_STEPS steps straight, then the same run
#     stopped at half and resumed from its checkpoint, for each recipe of
#     $RESUME_RECIPES, with the flags of $RESUME_EXTRA (default none; e.g.
#     "-attention flash"); `curves -resume` must find every training and
#     validation loss equal to the last bit. The straight run prints a text
#     sample generated on the GPU.
#  4. speed and memory, each run alone on the GPU: 124M and 1.3B shapes,
#     $BENCH_STEPS steps, distopt (its defaults) and PyTorch (BF16
#     autocast; torch.compile unless BENCH_COMPILE=0), once with each
#     attention backend of $BENCH_SDPA (default "flash cudnn auto"; the
#     fastest is the reference, issue 37):
#     tokens/s, MFU and peak memory (allocated by the process, and NVML's
#     device memory in use minus the idle figure, sampled by nvidia-smi);
#     then distopt at 1.3B again with $BENCH_LOWMEM (default -recompute:
#     LayerNorm and GELU inputs recomputed in backward, predicted at 0.824x
#     of PyTorch's memory with the default 8-bit moments, docs/BENCHMARKS.md;
#     empty: none).
#     `curves -speed` prints the table and writes $OUT/speed.json (copy it
#     to examples/gpt/results/speed.json), with the date, the commit built
#     ($bin/commit) and the GPU's name.
#  5. the GPU tests of examples/gpt/gpumodel.
#  7. (not by default) moments: issue 18's training quality, concurrently
#     on the one GPU: the small shape with -recipe current for $STEPS steps
#     (the loss part's batches and evaluations) with the moment types of
#     $MOMENTS (default "fp32 fp8,bf16 fp8"; -moments' values); `curves`
#     compares each 8-bit run with the FP32-moment one (final validation
#     loss within 1%, every evaluation after warm-up within 2%) and draws
#     $OUT/gpt_moments.png and $OUT/gpt_moments_diff.png.
#  6. (not by default) fp8grad: the small shape for $FP8GRAD_STEPS steps with
#     gradients reduce-scattered in BF16, in FP8 (E4M3), and in FP8 with
#     error feedback; the last lines of each side by side.
#  8. (not by default) profile: the GPU time of one step by kernel class,
#     distopt's own -profile (CUDA events by phase; under ncu too with
#     PROFILE_NCU=1) and compiled PyTorch ($PROFILE_SDPA attention,
#     default cudnn) under torch.profiler, tabled by
#     scripts/gpt/profile_classes.py. PROFILE_EXTRA adds flags to
#     distopt's -profile runs.
#  9. (not by default) gradtype: issue 37's gradients in BF16, as part 7
#     with -grad-type fp32 and bf16 (two processes): `curves` compares the
#     bf16 run with the fp32 one by the same criteria and draws
#     $OUT/gpt_gradtype.png and $OUT/gpt_gradtype_diff.png. (bf16 met
#     them and became the default on 2026-12-05.)
# 10. (not by default) actgrad: issue 37's activation gradients in BF16
#     (gpumodel.Options.ActGradBF16), as part 9 with -act-grad fp32 and
#     bf16: `curves` compares the bf16 run with the fp32 one by the same
#     criteria and draws $OUT/gpt_actgrad.png and
#     $OUT/gpt_actgrad_diff.png. If bf16 meets them, -act-grad's default
#     may become bf16.
# 11. (not by default) levers: the default and each flag set of $LEVERS
#     (default "-grad-type fp32|-act-grad fp32|-attention flash"), as part
#     9 in one set of concurrent runs, each compared with the default.
# Part 4 also runs distopt with each flag set of $BENCH_EXTRA ('|'-separated,
# default "-attention flash|-epilogue=false -act-grad fp32|-attention flash -epilogue=false
# -act-grad fp32 -fuse-dy=false -moments fp32": the defaults of the nineteenth session
# without cuDNN's attention, without the epilogue and BF16 activation gradients, and the
# defaults before 2026-12-05)
# at both shapes, rows of their own in the table.
# PARTS (default "loss resume bench tests") picks and orders parts 2-11.
#
# Measured on one H200 (2026-12-01, scripts/gpu/NOTES.md): parts 1-2 about
# 270 s (2000 steps of 32 x 256 tokens, five processes sharing the GPU;
# about 170 s at 8 x 256), 3 about 60 s, 4 about 90 s (before the
# BENCH_EXTRA rows and three attention backends of PyTorch: run it alone),
# 5 about 50 s on a fresh machine; at 32 x 256 run PARTS=loss alone.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=${BIN:-.gpu-gptlong}
py=${PYTHON:-/opt/torch/.venv/bin/python}
STEPS=${STEPS:-2000}
BATCH=${BATCH:-32}
SEQ=${SEQ:-256}
LR=${LR:-1e-3}
SEED=${SEED:-1}
EVAL_EVERY=${EVAL_EVERY:-100}
EVAL_WINDOWS=${EVAL_WINDOWS:-200}
RECIPES=${RECIPES:-current delayed tile}
RESUME_STEPS=${RESUME_STEPS:-60}
RESUME_RECIPES=${RESUME_RECIPES:-current delayed tile}
BENCH_STEPS=${BENCH_STEPS:-10}
# BENCH_SHAPES: the bench's shapes as preset:batch (default "small:16 1.3b:4"), or
# preset:batch:sdpa+sdpa for PyTorch attention backends of that shape's own (else BENCH_SDPA's).
BENCH_COMPILE=${BENCH_COMPILE:-1}
BENCH_SDPA=${BENCH_SDPA:-flash cudnn auto}
BENCH_BATCH_SMALL=${BENCH_BATCH_SMALL:-16}
BENCH_BATCH_XL=${BENCH_BATCH_XL:-4}
TOTAL=${TOTAL:-570}
TORCH_OTHER=${TORCH_OTHER-bf16}
HEAD_PRECISION=${HEAD_PRECISION:-bf16}
PARTS=${PARTS:-loss resume bench tests}
MOMENTS=${MOMENTS:-fp32 fp8,bf16 fp8}
BENCH_LOWMEM=${BENCH_LOWMEM-"-recompute"}
BENCH_EXTRA=${BENCH_EXTRA-"-attention flash|-epilogue=false -act-grad fp32|-attention flash -epilogue=false -act-grad fp32 -fuse-dy=false -moments fp32"}
LEVERS=${LEVERS-"-grad-type fp32|-act-grad fp32|-attention flash"}
WARMUP=$((STEPS / 20))

build() {
	set -e
	rm -rf $bin
	mkdir -p $bin
	go build -ldflags="-s -w" -o $bin/gpt ./examples/gpt
	{ git rev-parse --short HEAD && git diff --quiet HEAD || echo dirty; } | paste -sd- >$bin/commit
	go build -ldflags="-s -w" -o $bin/curves ./examples/gpt/curves
	bins="gpt curves"
	if [ "${GPUMODEL:-1}" = 1 ]; then
		go test -c -ldflags="-s -w" -o $bin/gpumodel.test ./examples/gpt/gpumodel
		bins="$bins gpumodel.test"
	fi
	if [ "${BENCH_UPDATE:-0}" = 1 ]; then # for a call that also runs distopt-bench-update (e.g. under ncu)
		go build -ldflags="-s -w" -o $bin/bench-update ./cmd/distopt-bench-update
		bins="$bins bench-update"
	fi
	go run ./examples/gpt/prepare -root "$(go env GOROOT)/src" -out $bin/data
	# one solid archive: the binaries share most of their bytes (the working
	# tree and the carry together must stay under 64 MiB)
	(cd $bin && tar cf - $bins | xz -T1 --lzma2=preset=9,dict=192MiB >bins.tar.xz && rm -f $bins)
	xz -T2 -6 $bin/data/*.tok
	du -sh $bin
}

# card: the GPU's name for the charts' titles (nvidia-smi's, else "GPU").
card() { nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep . || echo GPU; }

# slug FLAGS: a file-name part of a flag set ("-act-grad bf16" -> act_grad_bf16).
slug() { echo "$1" | tr -cs 'a-z0-9\n' '_' | sed 's/^_//; s/_$//'; }

start=$(date +%s)
left() { echo $((start + TOTAL - $(date +%s))); }

# peakmem NAME CMD...: runs CMD alone on the GPU while nvidia-smi samples
# the device memory in use; prints NAME's peak minus the idle figure.
peakmem() {
	name=$1
	shift
	idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
	nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$bin/$name.nvml" 2>/dev/null &
	smi=$!
	"$@"
	rc=$?
	kill $smi 2>/dev/null
	wait $smi 2>/dev/null
	awk -v n="$name" -v idle="$idle" '{ if ($1 > m) m = $1 } END { printf "%s: NVML peak device memory in use %d MiB above idle (%d MiB)\n", n, m - idle, idle }' "$bin/$name.nvml"
	return $rc
}

resume_check() {
	for r in $RESUME_RECIPES; do
		common="-backend gpu -data $bin/data -preset small -seq $SEQ -batch $BATCH -recipe $r -lr $LR -steps $RESUME_STEPS -eval-every 20 -eval-windows $BATCH -head-precision $HEAD_PRECISION ${RESUME_EXTRA:-}"
		half=$((RESUME_STEPS / 2))
		rm -rf "$bin/ck_$r"
		$bin/gpt $common -curve "$OUT/resume_${r}_full.json" -sample 200 >"$OUT/resume_${r}_full.log" 2>&1 || status=1
		$bin/gpt $common -ckpt "$bin/ck_$r" -stop-after $half -sample 0 -curve "$OUT/resume_${r}_first.json" >"$OUT/resume_${r}_first.log" 2>&1 || status=1
		$bin/gpt $common -ckpt "$bin/ck_$r" -resume -sample 0 -curve "$OUT/resume_${r}_rest.json" >"$OUT/resume_${r}_rest.log" 2>&1 || status=1
		tail -n 12 "$OUT/resume_${r}_full.log"
		$bin/curves -resume "$OUT/resume_${r}_full.json" "$OUT/resume_${r}_first.json" "$OUT/resume_${r}_rest.json" || status=1
		rm -rf "$bin/ck_$r"
	done
}

bench() {
	compile=""
	[ "$BENCH_COMPILE" = 1 ] && compile=--compile
	refs_small="" refs_1_3b="" extra_small="" extra_1_3b="" main=""
	for shape in ${BENCH_SHAPES:-small:$BENCH_BATCH_SMALL 1.3b:$BENCH_BATCH_XL}; do
		p=${shape%%:*}
		b=${shape#*:}
		sdpa=$BENCH_SDPA
		case $b in *:*) sdpa=$(echo "${b#*:}" | tr + ' ') b=${b%%:*} ;; esac
		peakmem "bench_distopt_$p" $bin/gpt -backend gpu -data $bin/data -preset $p -batch $b -steps $BENCH_STEPS \
			-eval-every 0 -eval-windows $b -sample 0 -curve "$OUT/bench_distopt_$p.json" >"$OUT/bench_distopt_$p.log" 2>&1 || status=1
		grep '^attention:' "$OUT/bench_distopt_$p.log"
		tail -n 3 "$OUT/bench_distopt_$p.log"
		extra=""
		old_ifs=$IFS
		IFS='|'
		for flags in $BENCH_EXTRA; do
			IFS=$old_ifs
			n=bench_distopt_${p}_$(slug "$flags")
			if [ "$(left)" -lt "${BENCH_EXTRA_RESERVE:-150}" ]; then
				echo "== $n skipped: $(left) s left"
				continue
			fi
			# shellcheck disable=SC2086 # $flags holds several flags
			peakmem "$n" $bin/gpt -backend gpu -data $bin/data -preset $p -batch $b -steps $BENCH_STEPS \
				-eval-every 0 -eval-windows $b -sample 0 $flags -curve "$OUT/$n.json" >"$OUT/$n.log" 2>&1 || status=1
			echo "== $n ($flags)"
			grep '^attention:' "$OUT/$n.log"
			tail -n 2 "$OUT/$n.log"
			# a failed option loses its row, not the table
			[ -s "$OUT/$n.json" ] && extra="$extra $OUT/$n.json"
		done
		IFS=$old_ifs
		eval "extra_$(echo $p | tr . _)=\$extra"
		refs=""
		for a in $sdpa; do
			peakmem "bench_torch_${p}_$a" "$py" scripts/gpt/torch_gpt.py --data $bin/data --shape $p --batch $b --steps $BENCH_STEPS \
				--eval-every 0 --eval-windows $b --sdpa $a $compile --name "torch $p ($a)" --out "$OUT/bench_torch_${p}_$a.json" \
				>"$OUT/bench_torch_${p}_$a.log" 2>&1 || status=1
			tail -n 2 "$OUT/bench_torch_${p}_$a.log"
			refs="$refs${refs:+,}$OUT/bench_torch_${p}_$a.json"
		done
		eval "refs_$(echo $p | tr . _)=\$refs"
		main="$main $OUT/bench_distopt_$p.json $refs"
	done
	lowmem=""
	if [ -n "$BENCH_LOWMEM" ]; then
		# shellcheck disable=SC2086 # BENCH_LOWMEM holds several flags
		peakmem bench_distopt_1.3b_lowmem $bin/gpt -backend gpu -data $bin/data -preset 1.3b -batch $BENCH_BATCH_XL \
			-steps $BENCH_STEPS -eval-every 0 -eval-windows $BENCH_BATCH_XL -sample 0 $BENCH_LOWMEM \
			-curve "$OUT/bench_distopt_1.3b_lowmem.json" >"$OUT/bench_distopt_1.3b_lowmem.log" 2>&1 || status=1
		tail -n 3 "$OUT/bench_distopt_1.3b_lowmem.log"
		lowmem="$OUT/bench_distopt_1.3b_lowmem.json $refs_1_3b"
	fi
	pairs=""
	for x in $extra_small; do
		pairs="$pairs $x $refs_small"
	done
	for x in $extra_1_3b; do
		pairs="$pairs $x $refs_1_3b"
	done
	# shellcheck disable=SC2086
	$bin/curves -speed -json "$OUT/speed.json" -commit "$(cat $bin/commit 2>/dev/null)" \
		-machine "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
		$main $pairs $lowmem || status=1
}

# profile: where each step's GPU time goes, by kernel class (issue 37's
# first lever). distopt's own `-profile` (CUDA events by phase over
# PROFILE_STEPS steps, the first left out: seconds per shape); with
# PROFILE_NCU=1 also distopt under ncu (gpu__time_duration of every
# launch; the step between the last two forward passes is taken, minutes
# per shape); PyTorch compiled with its $PROFILE_SDPA attention under
# torch.profiler (its last two steps; PROFILE_TORCH=0 skips it, about two
# minutes a shape with the compilation); scripts/gpt/profile_classes.py
# prints the ncu and PyTorch tables.
profile() {
	ncu=${NCU:-/usr/local/cuda/bin/ncu}
	refs_small="" refs_1_3b="" extra_small="" extra_1_3b="" main=""
	for shape in ${BENCH_SHAPES:-small:$BENCH_BATCH_SMALL 1.3b:$BENCH_BATCH_XL}; do
		p=${shape%%:*}
		b=${shape#*:}
		# the example's own profile: CUDA events by phase, seconds per shape
		timeout 120 $bin/gpt -backend gpu -data $bin/data -preset $p -batch $b -steps ${PROFILE_STEPS:-4} -eval-every 0 \
			-eval-windows $b -sample 0 -profile ${PROFILE_EXTRA:-} >"$OUT/profile_events_$p.log" 2>&1 || status=1
		sed -n '/^profile:/,$p' "$OUT/profile_events_$p.log"
		if [ "${PROFILE_NCU:-0}" = 1 ]; then
			timeout 240 $ncu --csv --metrics gpu__time_duration.sum --print-units base $bin/gpt -backend gpu -data $bin/data \
				-preset $p -batch $b -steps ${PROFILE_STEPS:-4} -eval-every 0 -eval-windows $b -sample 0 \
				>"$OUT/profile_distopt_$p.csv" 2>"$OUT/profile_distopt_$p.err" || status=1
			"$py" scripts/gpt/profile_classes.py "$OUT/profile_distopt_$p.csv" || status=1
		fi
		[ "${PROFILE_TORCH:-1}" = 1 ] || continue
		timeout 240 "$py" scripts/gpt/torch_gpt.py --data $bin/data --shape $p --batch $b --steps 8 --eval-every 0 \
			--eval-windows $b --sdpa ${PROFILE_SDPA:-cudnn} --compile --profile "$OUT/profile_torch_$p.json" \
			>"$OUT/profile_torch_$p.log" 2>&1 || status=1
		tail -n 2 "$OUT/profile_torch_$p.log"
		"$py" scripts/gpt/profile_classes.py "$OUT/profile_torch_$p.json" || status=1
	done
}

long() {
	budget=$(($(left) - ${LOSS_RESERVE:-150}))
	if [ $budget -lt 60 ]; then
		echo "loss runs skipped: $budget s left"
		status=1
		return
	fi
	echo "loss runs: $STEPS steps of $BATCH x $SEQ, stopped after $budget s at the latest"
	pids=""
	for r in $RECIPES; do
		# -head-precision bf16 (HEAD_PRECISION): the head rounded as autocast
		# rounds it in the reference, so that the comparison is like for
		# like outside the FP8 linear layers (issue 16).
		timeout $budget $bin/gpt -backend gpu -data $bin/data -preset small -seq $SEQ -batch $BATCH -recipe $r -lr $LR -seed $SEED \
			-steps $STEPS -eval-every $EVAL_EVERY -eval-windows $EVAL_WINDOWS -head-precision $HEAD_PRECISION -sample 300 \
			${LOSS_EXTRA:-} -curve "$OUT/long_$r.json" >"$OUT/long_$r.log" 2>&1 &
		pids="$pids $!"
	done
	timeout $budget "$py" scripts/gpt/torch_gpt.py --data $bin/data --init $bin/init.safetensors --lr $LR --steps $STEPS \
		--eval-every $EVAL_EVERY --eval-windows $EVAL_WINDOWS --name "PyTorch BF16" --out "$OUT/long_torch.json" >"$OUT/long_torch.log" 2>&1 &
	pids="$pids $!"
	if [ -n "$TORCH_OTHER" ]; then
		timeout $budget "$py" scripts/gpt/torch_gpt.py --data $bin/data --init $bin/init.safetensors --lr $LR --steps $STEPS \
			--eval-every $EVAL_EVERY --eval-windows $EVAL_WINDOWS --precision $TORCH_OTHER \
			--name "PyTorch $TORCH_OTHER$([ "$TORCH_OTHER" = bf16 ] && echo ' again')" --out "$OUT/long_torch_other.json" >"$OUT/long_torch_other.log" 2>&1 &
		pids="$pids $!"
	fi
	for p in $pids; do
		wait $p || status=1
	done
	for r in $RECIPES torch $([ -n "$TORCH_OTHER" ] && echo torch_other); do
		echo "== long_$r"
		grep -v '^step ' "$OUT/long_$r.log" | tail -n 8
		grep '^step ' "$OUT/long_$r.log" | tail -n 2
	done
	runs=""
	for r in $RECIPES; do
		runs="$runs $OUT/long_$r.json"
	done
	$bin/curves -ref "$OUT/long_torch.json" -steps $STEPS -warmup $WARMUP -png "$OUT/gpt_curves.png" -diff-png "$OUT/gpt_curves_diff.png" \
		-title "examples/gpt 124M shape on one $(card): validation loss" $runs || status=1
	if [ -n "$TORCH_OTHER" ]; then
		echo "== PyTorch $TORCH_OTHER against PyTorch BF16 (bf16: the reference's run-to-run spread; otherwise a precision change's effect; not a criterion)"
		$bin/curves -ref "$OUT/long_torch.json" -steps $STEPS -warmup $WARMUP "$OUT/long_torch_other.json"
	fi
}

# against NAME FLAG REF "VALUES" TITLE: the small shape with -recipe current
# for $STEPS steps (the loss part's batches and evaluations), one process
# per value of FLAG, concurrently on the one GPU; `curves` compares each run
# with the one of value REF (final validation loss within 1%, every
# evaluation after warm-up within 2%) and draws $OUT/gpt_NAME.png and
# $OUT/gpt_NAME_diff.png.
against() {
	name=$1 flag=$2 ref=$3 values=$4 title=$5
	budget=$(($(left) - ${LOSS_RESERVE:-30}))
	echo "$name runs: $STEPS steps of $BATCH x $SEQ ($flag: $values), stopped after $budget s at the latest"
	pids=""
	for v in $values; do
		n=${name}_$(echo "$v" | tr , _)
		timeout $budget $bin/gpt -backend gpu -data $bin/data -preset small -seq $SEQ -batch $BATCH -recipe current -lr $LR \
			-steps $STEPS -eval-every $EVAL_EVERY -eval-windows $EVAL_WINDOWS -head-precision $HEAD_PRECISION -sample 0 \
			$flag "$v" -curve "$OUT/$n.json" >"$OUT/$n.log" 2>&1 &
		pids="$pids $!"
	done
	for p in $pids; do
		wait $p || status=1
	done
	runs=""
	for v in $values; do
		n=${name}_$(echo "$v" | tr , _)
		echo "== $n"
		grep -v '^step ' "$OUT/$n.log" | tail -n 6
		grep '^step ' "$OUT/$n.log" | tail -n 1
		[ "$v" = "$ref" ] || runs="$runs $OUT/$n.json"
	done
	# shellcheck disable=SC2086
	$bin/curves -ref "$OUT/${name}_$ref.json" -steps $STEPS -warmup $WARMUP -png "$OUT/gpt_$name.png" -diff-png "$OUT/gpt_${name}_diff.png" \
		-title "$title" $runs || status=1
}

moments() {
	against moments -moments fp32 "$MOMENTS" "examples/gpt 124M on one $(card): 8-bit moments against FP32 moments"
}

gradtype() {
	against gradtype -grad-type fp32 "fp32 bf16" "examples/gpt 124M on one $(card): BF16 gradients against FP32 gradients"
}

# levers: issue 37's options that wait on the loss criteria, in one set of
# concurrent runs: the default and each of $LEVERS ('|'-separated flag
# sets), 124M with -recipe current for $STEPS steps (the loss part's
# batches and evaluations); `curves` compares each with the default (final
# validation loss within 1%, every evaluation after warm-up within 2%)
# and draws $OUT/gpt_levers.png and $OUT/gpt_levers_diff.png.
levers() {
	budget=$(($(left) - ${LOSS_RESERVE:-30}))
	if [ $budget -lt 60 ] || [ -z "$LEVERS" ]; then
		echo "lever runs skipped: $budget s left, LEVERS='$LEVERS'"
		status=1
		return
	fi
	echo "lever runs: $STEPS steps of $BATCH x $SEQ (the default, and: $LEVERS), stopped after $budget s at the latest"
	pids="" runs="" names="levers_default"
	old_ifs=$IFS
	IFS='|'
	for flags in "" $LEVERS; do
		IFS=$old_ifs
		n=levers_$(slug "${flags:-default}")
		# shellcheck disable=SC2086 # $flags holds several flags
		timeout $budget $bin/gpt -backend gpu -data $bin/data -preset small -seq $SEQ -batch $BATCH -recipe current -lr $LR \
			-steps $STEPS -eval-every $EVAL_EVERY -eval-windows $EVAL_WINDOWS -head-precision $HEAD_PRECISION -sample 0 \
			$flags -curve "$OUT/$n.json" >"$OUT/$n.log" 2>&1 &
		pids="$pids $!"
		[ -n "$flags" ] && runs="$runs $OUT/$n.json" && names="$names $n"
	done
	IFS=$old_ifs
	for p in $pids; do
		wait $p || status=1
	done
	for n in $names; do
		echo "== $n"
		grep -v '^step ' "$OUT/$n.log" | tail -n 6
		grep '^step ' "$OUT/$n.log" | tail -n 1
	done
	# shellcheck disable=SC2086
	$bin/curves -ref "$OUT/levers_default.json" -steps $STEPS -warmup $WARMUP -png "$OUT/gpt_levers.png" -diff-png "$OUT/gpt_levers_diff.png" \
		-title "examples/gpt 124M on one $(card): issue 37's options against the default" $runs || status=1
}

actgrad() {
	against actgrad -act-grad fp32 "fp32 bf16" "examples/gpt 124M on one $(card): BF16 activation gradients against FP32"
}

fp8grad() {
	for g in "" "-grad-fp8 e4m3" "-grad-fp8 e4m3 -grad-ef"; do
		n=fp8grad_$(echo "x $g" | tr -c 'a-z0-9\n' '_')
		# shellcheck disable=SC2086 # $g holds flags
		timeout 120 $bin/gpt -backend gpu -data $bin/data -preset small -seq $SEQ -batch $BATCH -lr $LR -steps ${FP8GRAD_STEPS:-100} \
			-eval-every ${FP8GRAD_STEPS:-100} -eval-windows 64 -sample 0 $g >"$OUT/$n.log" 2>&1 || status=1
		echo "gradients ${g:-in float32}:"
		grep -E 'gradients reduce|validation loss|rror|panic' "$OUT/$n.log" | tail -3
		grep -E '^step +[0-9]+/' "$OUT/$n.log" | tail -1
	done
}

run() {
	set +e
	export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
	OUT=${OUT:-.}
	. scripts/gpu/lib.sh
	cudnn_env >"$OUT/cudnn_env.txt" # the -attention cudnn rows: PyTorch's cuDNN and NVRTC, as in speed37.sh's measurements
	if [ -e $bin/bins.tar.xz ]; then
		xz -dc -T0 $bin/bins.tar.xz | tar x -C $bin && rm -f $bin/bins.tar.xz
	fi
	[ -e $bin/data/train.tok.xz ] && xz -d -f -T0 $bin/data/*.xz
	status=0
	{
		echo "== prepare ($(left) s left)"
		cat "$OUT/cudnn_env.txt"
		cat $bin/data/meta.json
		$bin/gpt -data $bin/data -preset small -seq $SEQ -batch $BATCH -seed $SEED -export-init $bin/init.safetensors -export-check=false || status=1
		for part in $PARTS; do
			echo "== $part ($(left) s left)"
			case $part in
			loss) long ;;
			resume) resume_check ;;
			bench) bench ;;
			tests)
				limit=$(($(left) - 5))
				if [ ! -x $bin/gpumodel.test ] || [ $limit -lt 10 ]; then
					echo "gpumodel tests skipped: no binary, or $limit s left"
					status=1
				else
					(cd examples/gpt/gpumodel && DISTOPT_REQUIRE_GPU=1 timeout $limit "$root/$bin/gpumodel.test" -test.run 'GPU' -test.v) >"$OUT/gpumodel_tests.log" 2>&1 || status=1
					grep -E '^(=== RUN|--- |PASS|FAIL|ok)' "$OUT/gpumodel_tests.log"
				fi
				;;
			fp8grad) fp8grad ;;
			moments) moments ;;
			gradtype) gradtype ;;
			actgrad) actgrad ;;
			levers) levers ;;
			profile) profile ;;
			*) echo "unknown part $part (want loss, resume, bench, tests, fp8grad, moments, gradtype, actgrad, levers, profile)"; status=1 ;;
			esac
		done
		echo "gpt long status: $status ($(left) s left)"
	} 2>&1 | tee "$OUT/gpt_long.log"
	grep -q "gpt long status: 0" "$OUT/gpt_long.log"
	rc=$?
	(cd "$OUT" && tar czf gpt_long_files.tgz *.json *_*.log cudnn_env.txt $(ls profile_*.csv profile_*.err profile_*.log 2>/dev/null) && rm -f $(ls *.json | grep -vx speed.json) resume_*.log bench_*.log long_*.log fp8grad_*.log moments_*.log gradtype_*.log actgrad_*.log levers_*.log gpumodel_*.log profile_*)
	return $rc
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
