#!/bin/sh
# updvariants.sh times variants of the update kernels' build flags (the
# UPDATE_* macros of internal/kernels/update.cu) against each other in one
# call on a GPU machine:
#
#   sh scripts/gpu/updvariants.sh build NAME=FLAGS...   # here: one distopt-bench-update per variant
#   sh scripts/gpu/updvariants.sh run                   # there (carry $BIN): the moments table of each
#
# e.g. build base= o1="-DUPDATE_QFIXED_OUTER=1". Each variant's PTX is
# generated into a copy of the tree (the committed PTX is not touched).
# BIN defaults to .gpu-updv (ignored by git); run writes $OUT/updvariants.log.
set -eu
cd "$(dirname "$0")/../.."
bin=${BIN:-.gpu-updv}

build() {
	rm -rf "$bin"
	mkdir -p "$bin"
	root=$(pwd)
	tree=$(mktemp -d)
	trap 'rm -rf "$tree"' EXIT
	git ls-files -z | xargs -0 cp --parents -t "$tree"
	for v in "$@"; do
		name=${v%%=*} flags=${v#*=}
		(cd "$tree/internal/kernels" &&
			for a in 80 90; do nvcc -ptx -arch=compute_$a -std=c++14 --fmad=false $flags -I. -o ptx/update_sm$a.ptx update.cu; done &&
			cd "$tree" && go build -ldflags="-s -w" -o "$root/$bin/bench-$name" ./cmd/distopt-bench-update)
		echo "$name: $flags" >>"$bin/variants"
	done
	# one archive with a large dictionary: the binaries share most bytes
	(cd "$bin" && tar cf - bench-* variants | xz -T1 --lzma2=preset=9,dict=192MiB >variants.tar.xz && rm -f bench-* variants)
	du -sh "$bin"
}

run() {
	set +e
	OUT=${OUT:-$bin}
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	xz -dc "$bin/variants.tar.xz" | tar -x -C "$bin"
	chmod +x "$bin"/bench-*
	{
		cat "$bin/variants"
		for round in 1 2; do
			for b in "$bin"/bench-*; do
				echo "== $(basename "$b") (round $round)"
				timeout 60 "$b" -tables moments ${ARGS:-} 2>&1 | grep -E '^\| |copy of'
			done
		done
	} >"$OUT/updvariants.log" 2>&1
	cat "$OUT/updvariants.log"
}

case "${1:-}" in
build) shift; build "$@" ;;
run) run ;;
*) echo "usage: $0 build NAME=FLAGS...|run" >&2; exit 2 ;;
esac
