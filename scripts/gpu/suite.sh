#!/bin/sh
# suite.sh: the whole GPU suite in one device call, in three steps.
#
#   sh scripts/gpu/suite.sh pack     (here) build.sh, then every binary of .gpu
#                                    in one solid archive, .gpu-pack/gpu.tar.xz
#   sh scripts/gpu/suite.sh fresh    (here) check that every carry built
#                                    (.gpu, .gpu-gptlong, .gpu-speed37, .gpu-mini) was built
#                                    from HEAD with no modified file; STALE_OK=1
#                                    lets hold go on anyway
#   sh scripts/gpu/suite.sh hold     (here) fresh, then move the generated PTX
#                                    and cubins out of the tree to $HOLD
#   ... the device call: carry [".gpu-pack"], command
#       sh scripts/gpu/suite.sh remote
#   sh scripts/gpu/suite.sh restore  (here) put them back, at once
#
# Why hold: the test binaries embed the kernels, and the device tool copies
# the working tree (about 55 MB, 48 of them PTX and cubins) beside the carry;
# both together must stay under 64 MiB. restore refuses to overwrite, and
# `git status` shows the held files as deleted until it runs.
#
# remote (on the GPU machine) unpacks the archive and runs scripts/gpu/run.sh
# with GPUS=1 BENCH=0 (one GPU; benchmarks are separate calls), cuDNN on the
# loader's path as lib.sh's cudnn_env puts it, under
# `timeout ${LIMIT:-560}`, logs in $OUT. PART=1/2 and PART=2/2 (run.sh)
# split the suite over two calls, so that a machine that stops answering
# (nothing under $OUT comes back) costs half of it.
set -eu
cd "$(dirname "$0")/../.."
HOLD=${HOLD:-/tmp/distopt-gpu-hold}
dirs="internal/kernels/ptx internal/kernels/cubin examples/gpt/kernels/ptx examples/gpt/kernels/cubin"

case ${1:-} in
pack)
	sh scripts/gpu/build.sh
	for z in .gpu/*.gz .gpu/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
	mkdir -p .gpu-pack
	tar cf - --exclude=.gpu/out --exclude=.gpu/coldstart .gpu |
		xz -T2 --lzma2=preset=6,dict=192MiB >.gpu-pack/gpu.tar.xz
	ls -l .gpu-pack/gpu.tar.xz
	;;
fresh)
	# Each carry built here names the commit it was built from on the first
	# line of its commit file (build.sh, lib.sh's stamp). A carry built at
	# another commit, or from modified tracked files, runs other code than
	# the tree: device time spent on stale binaries is lost.
	# Notes, docs and scripts do not go into the binaries.
	head=$(git rev-parse HEAD)
	dirty=$(git status --porcelain --untracked-files=no -- . ':!*.md' ':!scripts' ':!docs' | head -1)
	stale=0
	for f in .gpu/commit .gpu-gptlong/commit .gpu-speed37/commit .gpu-mini/commit; do
		[ -e "$f" ] || continue
		built=$(head -1 "$f")
		case "$head" in
		"$built"*) if grep '^modified: ' "$f" | grep -qv -e '\.md$' -e ' scripts/' -e ' docs/' || [ -n "$dirty" ]; then
			echo "suite.sh: $f: built at HEAD, but the tree or the build had modified files: rebuild after committing" >&2
			stale=1
		else
			echo "$f: built at HEAD ($built)"
		fi ;;
		*) echo "suite.sh: $f: built at $built, HEAD is $head: stale, rebuild it (or remove it if no call carries it)" >&2; stale=1 ;;
		esac
	done
	[ $stale = 0 ] || [ "${STALE_OK:-0}" = 1 ] || exit 1
	;;
hold)
	[ ! -e "$HOLD" ] || { echo "suite.sh: $HOLD exists: restore first" >&2; exit 1; }
	sh "$0" fresh
	for d in $dirs; do
		mkdir -p "$HOLD/$(dirname "$d")"
		mv "$d" "$HOLD/$d"
	done
	echo "held in $HOLD; run 'sh scripts/gpu/suite.sh restore' after the call"
	;;
restore)
	for d in $dirs; do
		[ ! -e "$d" ] || { echo "suite.sh: $d exists, not overwritten" >&2; exit 1; }
	done
	for d in $dirs; do mv "$HOLD/$d" "$d"; done
	rm -rf "$HOLD"
	git status --short -- $dirs
	;;
remote)
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	. scripts/gpu/lib.sh
	cudnn_env # examples/gpt/cudnn's tests: PyTorch's cuDNN and NVRTC
	xz -dc -T0 .gpu-pack/gpu.tar.xz | tar x
	GPUS=1 BENCH=0 timeout "${LIMIT:-560}" sh scripts/gpu/run.sh
	;;
*)
	echo "usage: sh scripts/gpu/suite.sh pack|fresh|hold|remote|restore" >&2
	exit 2
	;;
esac
