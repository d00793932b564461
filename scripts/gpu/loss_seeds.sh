#!/bin/sh
# loss_seeds.sh: issue 16's loss gate over several seeds (batch orders).
#
# One 2000-step run's distance from PyTorch's mixes the recipe's effect
# with the trajectories' spread: at the 124M gate, PyTorch's own final
# validation loss moves by 0.75% (sd) from one seed to the next, and an
# FP8 run's difference from the PyTorch run of its seed by about 1%
# (2026-12-06, six seeds, scripts/gpu/NOTES.md). The gate over seeds
# compares each recipe's mean difference with the criteria instead.
#
#   (on the GPU machine) BIN=.gpu-gptlong SEEDS="3 4" TOTAL=560 OUT=DIR \
#       sh scripts/gpu/loss_seeds.sh run
#     gpt_long.sh's loss part once per seed, concurrently on the one GPU
#     (four processes a seed: the recipes of $RECIPES and PyTorch BF16; two
#     seeds took about 350 s on an H100 as hand-written calls, 2026-12-06),
#     each in its own copy of BIN (the initial weights are exported per
#     seed) and into DIR/seedN/; then the gate below over every
#     DIR/seedN/. What comes back from the call is DIR/seeds_diff.png and
#     DIR/seeds.tgz (each seed's curves and gpt_long.log); the seed folders
#     are removed.
#   (anywhere) sh scripts/gpu/loss_seeds.sh gate DIR [CURVES]
#     `curves -seeds` over DIR/seedN/long_{torch,RECIPE}.json (earlier
#     calls' seeds copied in beside them count too): the table of each
#     seed's final difference, the means, and DIR/seeds_diff.png. CURVES
#     is the curves binary (default: go run ./examples/gpt/curves). Relative
#     paths are taken from the caller's directory.
#
# Environment: RECIPES (default "current delayed tile"), STEPS (2000),
# WARMUP (STEPS/20), and gpt_long.sh's for the runs.
set -u
caller=$(pwd)
cd "$(dirname "$0")/../.."
RECIPES=${RECIPES:-current delayed tile}
STEPS=${STEPS:-2000}
WARMUP=${WARMUP:-$((STEPS / 20))}

# list DIR NAME: DIR/seedN/long_NAME.json, comma-separated, in the seeds' order.
list() {
	for d in "$1"/seed[0-9]*; do
		case ${d##*/seed} in *[!0-9]*) continue ;; esac # seed3.bak is not seed 3
		echo "${d##*/seed} $d/long_$2.json"
	done | sort -n | cut -d' ' -f2- | paste -sd, -
}

# abs PATH: PATH from the caller's directory.
abs() { case $1 in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }

gate() {
	dir=$1
	shift
	[ $# -eq 0 ] || [ ! -e "$(abs "$1")" ] || set -- "$(abs "$1")" # a curves binary given as a path
	[ -n "$(ls -d "$dir"/seed[0-9]* 2>/dev/null)" ] || { echo "loss_seeds.sh: no $dir/seed*/ to compare" >&2; return 2; }
	runs=""
	for r in $RECIPES; do
		runs="$runs $(list "$dir" "$r")"
	done
	[ $# -gt 0 ] || set -- go run ./examples/gpt/curves
	# shellcheck disable=SC2086 # runs holds one comma-separated list per recipe
	"$@" -seeds -steps "$STEPS" -warmup "$WARMUP" -ref "$(list "$dir" torch)" -diff-png "$dir/seeds_diff.png" \
		-title "loss over seeds: mean difference from PyTorch BF16 of the same seed" $runs
}

case "${1:-}" in
run)
	bin=${BIN:-.gpu-gptlong}
	out=$(abs "${OUT:?set OUT}")
	total=${TOTAL:-560}
	if [ -e "$bin/bins.tar.xz" ]; then
		xz -dc -T0 "$bin/bins.tar.xz" | tar x -C "$bin" && rm -f "$bin/bins.tar.xz"
	fi
	[ -e "$bin/data/train.tok.xz" ] && xz -d -f -T0 "$bin"/data/*.xz
	for s in ${SEEDS:?set SEEDS}; do
		rm -rf "$bin.seed$s" && cp -r "$bin" "$bin.seed$s"
		mkdir -p "$out/seed$s"
		BIN=$bin.seed$s OUT=$out/seed$s PARTS=loss SEED=$s TORCH_OTHER='' LOSS_RESERVE=${LOSS_RESERVE:-20} TOTAL=$total \
			sh scripts/gpu/gpt_long.sh run >"$out/seed$s/run.log" 2>&1 &
	done
	wait
	for s in $SEEDS; do
		names=long_torch.json
		for r in $RECIPES; do names="$names long_$r.json"; done
		# shellcheck disable=SC2086 # names holds several files
		(cd "$out/seed$s" && tar xzf gpt_long_files.tgz $names) || { echo "== seed $s failed:"; tail -n 20 "$out/seed$s/run.log"; }
		rm -rf "$bin.seed$s"
	done
	gate "$out" "$(pwd)/$bin/curves"
	rc=$?
	(cd "$out" && tar czf seeds.tgz seed*/long_*.json seed*/gpt_long.log && rm -rf seed[0-9]*)
	exit $rc
	;;
gate)
	shift
	[ $# -ge 1 ] || { echo "usage: $0 gate DIR [CURVES...]" >&2; exit 2; }
	d=$(abs "$1")
	shift
	gate "$d" "$@"
	;;
*)
	sed -n '2,30p' "$0"
	exit 2
	;;
esac
